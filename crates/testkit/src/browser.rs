//! A real headless Chromium driven over WebDriver: Debian's `chromium` and `chromium-driver`
//! (`scripts/test` installs them), one `chromedriver` per browser on a free loopback port, and
//! a throw-away profile.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A browser; dropping it ends chromedriver (which ends the browser).
pub struct Browser {
    pub client: Client,
    driver: Child,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium window of 1400×1000. Panics with what to
    /// install when they are missing: a browser test never passes by not running.
    pub async fn start() -> Browser {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(bin).exists(),
                "{bin} is missing: install Debian's chromium and chromium-driver (scripts/test does)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile =
            std::env::temp_dir().join(format!("postern-chromium-{}-{port}", std::process::id()));
        let caps = json!({
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1400,1000", "--no-first-run", "--disable-extensions",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
            "unhandledPromptBehavior": "ignore",
        });
        let caps = caps.as_object().cloned().unwrap_or_default();
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..100 {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Browser {
                        client,
                        driver,
                        profile,
                    }
                }
                Err(e) => last = Some(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not open a session: {last:?}");
    }

    /// Ends the session and the driver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
