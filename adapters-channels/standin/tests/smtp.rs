//! The SMTP stand-in driven by Herald's real e-mail adapter (lettre, step by step): what it records and
//! what each scripted step makes the adapter observe.

use std::time::Duration;

use herald_channels::config::{ChannelConfig, SmtpTls};
use herald_channels::kinds::email::EmailChannel;
use herald_channels::kinds::email::{Email, EmailSettings};
use herald_domain::{IdempotencyKey, Observation};
use herald_ports::{Channel, OutboundMessage};
use herald_standin::{Chaos, SmtpScript, SmtpStage, SmtpStandIn};
use secrecy::SecretString;

const TO: &str = "reader@mail.example.org";

fn channel(standin: &SmtpStandIn) -> EmailChannel {
    let mut config = ChannelConfig::with_settings::<Email>(
        "mail",
        "",
        EmailSettings {
            host: Some("127.0.0.1".into()),
            port: Some(standin.port()),
            tls: Some(SmtpTls::None),
            from: Some("herald@notify.example.org".into()),
            ..EmailSettings::default()
        },
    );
    config.timeout_ms = 500;
    EmailChannel::new(&config).expect("a valid e-mail channel")
}

fn message(reference: &str, to: &str) -> OutboundMessage {
    OutboundMessage {
        reference: reference.to_owned(),
        idempotency_key: IdempotencyKey::for_task(reference),
        destination: SecretString::from(to),
        text: "You have a new notification".to_owned(),
        ttl_seconds: 60,
    }
}

#[tokio::test]
async fn an_accepted_message_is_recorded_with_its_message_id_and_queue_id() {
    let smtp = SmtpStandIn::start().await.expect("bind");
    let got = channel(&smtp).send(&message("r-1", TO)).await;
    assert_eq!(got.observation, Observation::Accepted { provider_msg_id: Some("Q1".into()) }, "{got:?}");
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].rcpt, [TO]);
    assert_eq!(messages[0].mail_from, "herald@notify.example.org");
    assert_eq!(messages[0].message_id.as_deref(), Some("<ntf-r-1@notify.example.org>"));
    assert_eq!(messages[0].reference(), Some("r-1"));
    assert!(messages[0].body().contains("You have a new notification"));
    assert_eq!((smtp.sends_for("r-1"), smtp.sends_to(TO), smtp.transactions()), (1, 1, 1));
    assert!(!format!("{messages:?}").contains(TO), "Debug redacts the recipients");
    smtp.shutdown().await;
}

#[tokio::test]
async fn refusals_at_each_stage_record_nothing_and_say_what_they_prove() {
    let smtp = SmtpStandIn::start().await.expect("bind");
    let cases = [
        (SmtpScript::Reply { at: SmtpStage::Mail, code: 421 }, "retry"),
        (SmtpScript::Reply { at: SmtpStage::Rcpt, code: 451 }, "retry"),
        (SmtpScript::Reply { at: SmtpStage::Rcpt, code: 550 }, "rejected"),
        (SmtpScript::Reply { at: SmtpStage::Data, code: 554 }, "rejected"),
        (SmtpScript::Reply { at: SmtpStage::EndOfData, code: 451 }, "retry"),
        (SmtpScript::Reply { at: SmtpStage::EndOfData, code: 554 }, "rejected"),
        (SmtpScript::Drop { at: SmtpStage::Rcpt }, "retry"),
    ];
    for (i, (step, proves)) in cases.into_iter().enumerate() {
        smtp.script(step);
        let got = channel(&smtp).send(&message(&format!("r-{i}"), TO)).await;
        let seen = match got.observation {
            Observation::RetryableReject { .. } => "retry",
            Observation::Rejected => "rejected",
            _ => "other",
        };
        assert_eq!(seen, proves, "{step:?}: {got:?}");
    }
    assert_eq!(smtp.sends(), 0, "a refusal is answered before anything is recorded");
    smtp.shutdown().await;
}

#[tokio::test]
async fn no_reply_to_the_final_dot_is_unknown_but_the_message_was_taken() {
    let smtp = SmtpStandIn::start().await.expect("bind");
    smtp.script(SmtpScript::Delay(Duration::from_secs(2)));
    smtp.script(SmtpScript::Drop { at: SmtpStage::EndOfData });
    smtp.script(SmtpScript::Hang);
    let mail = channel(&smtp);
    assert_eq!(mail.send(&message("late", TO)).await.observation, Observation::Timeout);
    assert_eq!(mail.send(&message("dropped", TO)).await.observation, Observation::IoError);
    assert_eq!(mail.send(&message("hung", TO)).await.observation, Observation::Timeout);
    assert_eq!((smtp.sends_for("late"), smtp.sends_for("dropped"), smtp.sends_for("hung")), (1, 1, 1));
    smtp.shutdown().await;
}

#[tokio::test]
async fn a_step_for_a_recipient_wins_and_leaves_the_shared_queue_alone() {
    let smtp = SmtpStandIn::start().await.expect("bind");
    smtp.script(SmtpScript::Reply { at: SmtpStage::Rcpt, code: 550 });
    smtp.script_for("other@mail.example.org", SmtpScript::Reply { at: SmtpStage::EndOfData, code: 451 });
    let mail = channel(&smtp);
    let first = mail.send(&message("o-1", "other@mail.example.org")).await;
    assert!(matches!(first.observation, Observation::RetryableReject { .. }), "{first:?}");
    assert_eq!(mail.send(&message("r-1", TO)).await.observation, Observation::Rejected, "the shared step is kept");
    assert!(matches!(mail.send(&message("r-2", TO)).await.observation, Observation::Accepted { .. }));
    assert_eq!(smtp.sends(), 1);
    smtp.shutdown().await;
}

#[tokio::test]
async fn chaos_draws_are_read_as_smtp_and_acceptances_count_before_misbehaving() {
    let smtp = SmtpStandIn::start().await.expect("bind");
    let quiet = Chaos {
        accept: 0,
        hang: 0,
        unavailable: 0,
        too_many: 0,
        drop_before: 0,
        drop_after: 0,
        garbage: 0,
        ..Chaos::mixed(3, Duration::from_secs(1))
    };
    smtp.set_chaos(Some(Chaos { unavailable: 1, too_many: 1, drop_before: 1, gone: 1, ..quiet.clone() }));
    let mail = channel(&smtp);
    for i in 0..8 {
        let got = mail.send(&message(&format!("n{i}"), TO)).await;
        assert!(matches!(got.observation, Observation::RetryableReject { .. } | Observation::Rejected), "{got:?}");
    }
    assert_eq!(smtp.sends(), 0);
    smtp.set_chaos(Some(Chaos { hang: 1, drop_after: 1, garbage: 1, ..quiet }));
    for i in 0..6 {
        let got = mail.send(&message(&format!("a{i}"), TO)).await;
        assert!(matches!(got.observation, Observation::Timeout | Observation::IoError), "{got:?}");
    }
    assert_eq!(smtp.sends(), 6, "every misbehaving acceptance recorded");
    let draws: u64 = smtp.chaos_draws().iter().map(|(_, n)| n).sum();
    assert_eq!(draws, 6, "the counts restart with new weights");
    smtp.shutdown().await;
}

#[test]
#[should_panic(expected = "not a 4yz or 5yz")]
fn a_scripted_reply_must_be_a_refusal() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let smtp = SmtpStandIn::start().await.expect("bind");
        smtp.script(SmtpScript::Reply { at: SmtpStage::Rcpt, code: 250 });
    });
}
