//! The fault proxy: a TCP relay that cuts some connections at a random byte offset, in either
//! direction (a request cut before the gateway read it all, or an answer cut half-way back).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::rng::Rng;

pub struct FaultProxy {
    pub addr: SocketAddr,
    /// Connections cut per thousand (0: a plain relay).
    cut_per_mille: Arc<AtomicU64>,
    pub cuts: Arc<AtomicU64>,
}

impl FaultProxy {
    pub async fn start(target: SocketAddr, rng: Rng, cut_per_mille: u64) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a proxy port");
        let addr = listener.local_addr().expect("its address");
        let cut = Arc::new(AtomicU64::new(cut_per_mille));
        let cuts = Arc::new(AtomicU64::new(0));
        let (rate, counted) = (cut.clone(), cuts.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while let Ok((client, _)) = listener.accept().await {
                n += 1;
                let mut r = rng.fork(n);
                let plan = if r.chance(rate.load(Ordering::Relaxed)) {
                    counted.fetch_add(1, Ordering::Relaxed);
                    // Which direction is cut, after how many bytes of it.
                    Some((r.chance(500), r.below(4096) as usize))
                } else {
                    None
                };
                tokio::spawn(relay(client, target, plan));
            }
        });
        FaultProxy {
            addr,
            cut_per_mille: cut,
            cuts,
        }
    }

    /// No more cuts (the recovery pass).
    pub fn calm(&self) {
        self.cut_per_mille.store(0, Ordering::Relaxed);
    }
}

async fn relay(client: TcpStream, target: SocketAddr, plan: Option<(bool, usize)>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let (up_limit, down_limit) = match plan {
        Some((true, at)) => (Some(at), None),
        Some((false, at)) => (None, Some(at)),
        None => (None, None),
    };
    // Either direction ending (or being cut) ends both: a cut is a lost connection.
    tokio::select! {
        _ = pipe(cr, sw, up_limit) => {}
        _ = pipe(sr, cw, down_limit) => {}
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    limit: Option<usize>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut left = limit.unwrap_or(usize::MAX);
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let take = n.min(left);
        if to.write_all(&buf[..take]).await.is_err() {
            return;
        }
        left -= take;
        if left == 0 {
            return;
        }
    }
}
