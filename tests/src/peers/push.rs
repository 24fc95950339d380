//! Cross-checks of the Web Push channel by implementations nobody here wrote. The push service stand-in
//! itself (VAPID verified, payload decrypted) is `herald_standin::WebPushService`.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use herald_standin::WebPushService;

/// Decrypts `body` for subscription `n` of `peer` with Python's `http_ece` (an implementation nobody here
/// wrote); the plaintext, or why not.
///
/// # Errors
/// When python3 or http_ece is missing, or the decryption fails.
pub async fn decrypt_with_http_ece(peer: &WebPushService, n: usize, body: &[u8]) -> anyhow::Result<String> {
    let (private_key, auth) = peer.keys_of(n);
    let input = serde_json::json!({ "body": URL_SAFE_NO_PAD.encode(body), "private_key": private_key, "auth": auth });
    run_python("ece_decrypt.py", &input, "http_ece").await
}

/// Verifies a VAPID `Authorization` header for `audience` with Python's `cryptography` (`vapid_verify.py`);
/// its answer (`ok sub=…`), or why not.
///
/// # Errors
/// When python3 or cryptography is missing, or the token does not verify.
pub async fn verify_vapid_with_python(authorization: &str, audience: &str) -> anyhow::Result<String> {
    let input = serde_json::json!({ "authorization": authorization, "audience": audience });
    Ok(run_python("vapid_verify.py", &input, "VAPID check").await?.trim().to_owned())
}

/// Runs the Python script `script` of this folder with `input` as JSON on its standard input; its output.
async fn run_python(script: &str, input: &serde_json::Value, what: &str) -> anyhow::Result<String> {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(super::python())
        .arg(super::script(script))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("stdin"))?;
    stdin.write_all(input.to_string().as_bytes()).await?;
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await??;
    anyhow::ensure!(output.status.success(), "{what} failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8(output.stdout)?)
}
