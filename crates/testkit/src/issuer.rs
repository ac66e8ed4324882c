//! An OpenID issuer on loopback for the resource-server tests (issue 50): real HTTP discovery
//! (`/.well-known/openid-configuration`) and a key set (`/jwks`) of ES256 keys generated for the
//! run, and tokens signed with them — including the ones a real provider would never issue
//! (expired, for another audience, `alg: none`, HS256 keyed with the public key, a key it does
//! not publish) that the refusal tests need. It counts key-set fetches and can be taken down.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

/// A signing key: its id, the private half for signing, the public half's JWK.
struct Key {
    kid: String,
    signing: EncodingKey,
    jwk: Value,
}

impl Key {
    fn generate(kid: &str) -> Key {
        let pair =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a P-256 key");
        let signing = EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes())
            .expect("jsonwebtoken reads a PKCS#8 P-256 key");
        // The uncompressed point: 0x04, x, y.
        let point = pair.public_key_raw();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65]),
        });
        Key {
            kid: kid.to_string(),
            signing,
            jwk,
        }
    }
}

struct Published {
    url: Mutex<String>,
    keys: Mutex<Vec<Arc<Key>>>,
    fetches: AtomicUsize,
    down: AtomicBool,
}

/// The issuer, serving until dropped.
pub struct TestIssuer {
    /// Its `iss` (`http://127.0.0.1:PORT`).
    pub url: String,
    published: Arc<Published>,
    /// Keys that sign but are not in the key set.
    hidden: Mutex<Vec<Arc<Key>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl TestIssuer {
    /// Starts on a free loopback port with one published key, `k1`.
    pub async fn start() -> TestIssuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let published = Arc::new(Published {
            url: Mutex::new(url.clone()),
            keys: Mutex::new(vec![Arc::new(Key::generate("k1"))]),
            fetches: AtomicUsize::new(0),
            down: AtomicBool::new(false),
        });
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(metadata))
            .route("/jwks", get(jwks))
            .with_state(published.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestIssuer {
            url,
            published,
            hidden: Mutex::new(Vec::new()),
            server,
        }
    }

    /// Signs `claims` with the published key `k1`; `iss`, `iat` and an `exp` five minutes away
    /// are added unless `claims` sets them.
    pub fn token(&self, claims: Value) -> String {
        self.signed_by("k1", claims)
    }

    /// Signs `claims` with the key `kid` (published, or made with [`TestIssuer::hidden_key`]).
    pub fn signed_by(&self, kid: &str, claims: Value) -> String {
        let key = self
            .published
            .keys
            .lock()
            .unwrap()
            .iter()
            .chain(self.hidden.lock().unwrap().iter())
            .find(|k| k.kid == kid)
            .cloned()
            .unwrap_or_else(|| panic!("no key {kid}"));
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, &self.full(claims), &key.signing).expect("signed")
    }

    /// A new key `kid`, published in the key set from now on.
    pub fn publish_key(&self, kid: &str) {
        self.published
            .keys
            .lock()
            .unwrap()
            .push(Arc::new(Key::generate(kid)));
    }

    /// Withdraws the published key `kid` from the key set (it still signs: a compromised key
    /// the issuer no longer vouches for).
    pub fn withdraw_key(&self, kid: &str) {
        let mut published = self.published.keys.lock().unwrap();
        let i = published
            .iter()
            .position(|k| k.kid == kid)
            .unwrap_or_else(|| panic!("no published key {kid}"));
        let key = published.remove(i);
        self.hidden.lock().unwrap().push(key);
    }

    /// A new key `kid` that signs but is never published.
    pub fn hidden_key(&self, kid: &str) {
        self.hidden
            .lock()
            .unwrap()
            .push(Arc::new(Key::generate(kid)));
    }

    /// `claims` with `alg: none` and no signature.
    pub fn unsigned(&self, claims: Value) -> String {
        let header = B64.encode(br#"{"alg":"none","typ":"JWT"}"#);
        let body = B64.encode(self.full(claims).to_string());
        format!("{header}.{body}.")
    }

    /// `claims` signed HS256 with the published key's JWK (its public half) as the secret: the
    /// algorithm-confusion attack.
    pub fn hs256_with_public_key(&self, claims: Value) -> String {
        let jwk = self.published.keys.lock().unwrap()[0].jwk.to_string();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".to_string());
        let key = EncodingKey::from_secret(jwk.as_bytes()).expect("an HMAC key");
        jsonwebtoken::encode(&header, &self.full(claims), &key).expect("signed")
    }

    /// How many times the key set was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.published.fetches.load(Ordering::SeqCst)
    }

    /// While down, discovery and the key set answer 503.
    pub fn set_down(&self, down: bool) {
        self.published.down.store(down, Ordering::SeqCst);
    }

    fn full(&self, claims: Value) -> Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let mut full = json!({"iss": self.url, "iat": now, "exp": now + 300});
        if let (Some(full), Value::Object(given)) = (full.as_object_mut(), claims) {
            full.extend(given);
        }
        full
    }
}

async fn metadata(State(p): State<Arc<Published>>) -> Response {
    if p.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let url = p.url.lock().unwrap().clone();
    Json(json!({
        "issuer": url,
        "jwks_uri": format!("{url}/jwks"),
        "token_endpoint": format!("{url}/token"),
        "response_types_supported": ["code"],
        "id_token_signing_alg_values_supported": ["ES256"],
    }))
    .into_response()
}

async fn jwks(State(p): State<Arc<Published>>) -> Response {
    if p.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    p.fetches.fetch_add(1, Ordering::SeqCst);
    let keys: Vec<Value> = p
        .keys
        .lock()
        .unwrap()
        .iter()
        .map(|k| k.jwk.clone())
        .collect();
    Json(json!({ "keys": keys })).into_response()
}
