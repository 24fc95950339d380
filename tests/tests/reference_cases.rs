//! SPEC §10: every reference case as its own test, named after its id.

use herald_tests::cases;

macro_rules! case {
    ($name:ident, $case:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let evidence = $case().await.expect("case ran");
            evidence.assert_passed();
        }
    };
}

case!(n1_concurrent_create_gives_one_notification, cases::n1);
case!(n2_normal_delivery_on_both_channels, cases::n2);
case!(c1_one_claimer_wins_and_four_workers_drain_twenty, cases::c1);
case!(nc1_negative_control_claim_without_lock_has_two_winners, cases::nc1);
case!(t1_idempotent_timeout_then_replay, cases::t1);
case!(t2_queryable_timeout_then_query_found, cases::t2);
case!(t3_queries_fail_task_parked_resolved_once, cases::t3);
case!(nc2_negative_control_blind_resend_sends_twice, cases::nc2);
case!(f1_retry_after_503_and_fail_on_400, cases::f1);
case!(b1_switched_off_or_expired_before_claim, cases::b1);
case!(b2_expired_after_uncertain_attempt_parks, cases::b2);
case!(b3_refusal_after_uncertain_attempt_stays_unknown, cases::b3);
case!(p1_killed_process_lease_expires_second_process_replays, cases::p1);
case!(p2_paused_process_finish_is_stale, cases::p2);
case!(nc3_negative_control_finish_by_id_overwrites_sent, cases::nc3);
