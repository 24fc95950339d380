//! The status events' cost on the drain (issue 46, `--status-events`): a receiver in this process that
//! takes every post (204), and the subscription Herald's configuration gets to post to it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

/// The signing secret of the benchmark's subscription.
pub const SECRET: &str = "whsec_YmVuY2gtc3RhdHVzLWV2ZW50cy1zZWNyZXQtMzJieXRl";

/// A loopback HTTP/1.1 receiver answering 204 to every request, counting them.
pub struct Receiver {
    pub url: String,
    posts: Arc<AtomicU64>,
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/status", listener.local_addr()?);
        let posts = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&posts);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let (read, mut write) = socket.into_split();
                    let mut read = BufReader::new(read);
                    loop {
                        let mut length = 0usize;
                        let mut line = String::new();
                        loop {
                            line.clear();
                            if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if let Some((name, value)) = line.split_once(':') {
                                if name.eq_ignore_ascii_case("content-length") {
                                    length = value.trim().parse().unwrap_or(0);
                                }
                            }
                        }
                        let mut body = vec![0; length];
                        if read.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        counted.fetch_add(1, Ordering::Relaxed);
                        if write.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(Receiver { url, posts })
    }

    pub fn posts(&self) -> u64 {
        self.posts.load(Ordering::Relaxed)
    }
}

/// The configuration lines of a subscription to `url` that wants every kind.
pub fn subscription(url: &str, secret_file: &std::path::Path) -> String {
    format!(
        "\n[[status_subscription]]\nname = \"bench\"\nurl = \"{url}\"\nsecret_file = \"{}\"\nallow_loopback_endpoint = true\n",
        secret_file.display()
    )
}
