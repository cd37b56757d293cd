//! The registry's HTTP side of a pull (the OCI distribution API's `GET` and
//! `HEAD` of manifests and blobs): credentials and the token dance, the
//! redirect policy, and every answer read through [`super::bounded`].
//!
//! - **Deadlines**: each request, its answer's body included, ends within
//!   `--oci-request-timeout` (a token request is part of the request that
//!   needed it); a blob's download within the pull's deadline
//!   (`--oci-pull-timeout`, which also bounds every request of the pull).
//! - **Caps**: manifests (by tag or digest, signature manifests too)
//!   [`MAX_MANIFEST_BYTES`] of bytes, token answers [`MAX_TOKEN_BYTES`],
//!   blobs the size their manifest declares; an error answer's body is
//!   read for at most [`bounded::ERROR_READ`] bytes and quoted escaped, at
//!   most [`bounded::ERROR_SHOWN`] bytes of it.
//! - **Redirects** are followed (at most [`MAX_REDIRECTS`]) only to the
//!   registry's own origin or to a host named with `--oci-blob-host`, and
//!   to plain HTTP only for a `host[:port]` named with
//!   `--oci-insecure-registry`; anything else is refused (`oci/redirect`)
//!   without a request to it.
//! - **Credentials**: Basic when the registry asks for it, else a Bearer
//!   token from the realm the registry names (plain HTTP realms only for
//!   insecure hosts), cached per repository until refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oci_client::secrets::RegistryAuth;
use reqwest::{Method, StatusCode, Url, header};
use serde::Deserialize;
use tokio::time::Instant;

use super::auth::Credentials;
use super::bounded::{self, Cut};
use super::reference::OciRef;
use super::{OciError, rules};
use crate::locks::MutexExt;

/// Default of `--oci-request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `--oci-pull-timeout`.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(120);
/// Most bytes of a manifest (registries refuse bigger ones).
pub const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;
/// Most bytes of a token answer.
pub const MAX_TOKEN_BYTES: u64 = 64 * 1024;
/// Most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 5;

/// How registries are reached.
#[derive(Debug, Clone)]
pub(crate) struct RegistryConfig {
    /// `host[:port]`s reached over plain HTTP.
    pub insecure: Vec<String>,
    /// `host[:port]`s a registry may redirect blob downloads to.
    pub blob_hosts: Vec<String>,
    /// Extra trusted CA certificates (PEM).
    pub roots: Vec<Vec<u8>>,
    /// Each request's deadline.
    pub request_timeout: Duration,
}

/// Credentials learnt to work for a repository.
#[derive(Clone)]
enum Authz {
    Basic(String, String),
    Bearer(String),
}

/// The HTTP client for pulls; cheap to share.
pub(crate) struct Registry {
    http: reqwest::Client,
    credentials: Credentials,
    insecure: Arc<Vec<String>>,
    request_timeout: Duration,
    authz: Mutex<HashMap<String, Authz>>,
}

/// `host[:port]` of `url` (the port only when the URL names one).
fn host_port(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// Whether a redirect from `first` to `to` may be followed.
fn redirect_allowed(
    first: &Url,
    to: &Url,
    blob_hosts: &[String],
    insecure: &[String],
) -> Result<(), String> {
    let target = host_port(to);
    let plain = to.scheme() == "http";
    if plain && !insecure.iter().any(|h| h.eq_ignore_ascii_case(&target)) {
        return Err(format!(
            "a redirect to plain HTTP ({}://{target}) is refused: {target} is not named with \
             --oci-insecure-registry",
            to.scheme()
        ));
    }
    if to.scheme() != "http" && to.scheme() != "https" {
        return Err(format!("a redirect to a {} URL is refused", to.scheme()));
    }
    let same_origin = first.scheme() == to.scheme()
        && first.host_str() == to.host_str()
        && first.port_or_known_default() == to.port_or_known_default();
    if same_origin || blob_hosts.iter().any(|h| h.eq_ignore_ascii_case(&target)) {
        Ok(())
    } else {
        Err(format!(
            "a redirect from {} to {}://{target} is refused: only the registry's own origin \
             and the hosts named with --oci-blob-host are followed",
            host_port(first),
            to.scheme()
        ))
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    token: Option<String>,
    access_token: Option<String>,
}

/// The parameters of a `WWW-Authenticate` challenge (`Bearer realm="…",…`).
fn challenge(value: &str) -> (String, HashMap<String, String>) {
    let (scheme, rest) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
    let mut params = HashMap::new();
    let mut rest = rest.trim();
    while let Some((key, tail)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let tail = tail.trim_start();
        let (value, next) = match tail.strip_prefix('"') {
            Some(quoted) => match quoted.split_once('"') {
                Some((value, next)) => (value, next),
                None => (quoted, ""),
            },
            None => tail.split_once(',').unwrap_or((tail, "")),
        };
        params.insert(key, value.to_string());
        rest = next.trim_start_matches(',').trim();
    }
    (scheme.to_ascii_lowercase(), params)
}

/// The rule of a failed request's error.
fn transport_error(err: &reqwest::Error, what: &str) -> OciError {
    let (rule, hint) = if err.is_redirect() {
        (rules::REDIRECT, "")
    } else {
        (
            rules::UNREACHABLE,
            "; check the registry address, that it serves HTTPS with a certificate the host \
             trusts (--oci-ca-file), or name it in --oci-insecure-registry if it is plain HTTP",
        )
    };
    OciError::new(rule, format!("{what}: {}{hint}", bounded::error_chain(err)))
}

/// The rule of a bounded read that stopped.
pub(crate) fn cut_error(cut: Cut, what: &str) -> OciError {
    let rule = match cut {
        Cut::TooLarge { .. } => rules::ANSWER_TOO_LARGE,
        Cut::Deadline { .. } => rules::DEADLINE,
        Cut::Failed(_) => rules::UNREACHABLE,
    };
    let hint = match rule {
        rules::DEADLINE => {
            " (--oci-request-timeout bounds each request, --oci-pull-timeout a whole pull)"
        }
        _ => "",
    };
    OciError::new(rule, format!("{what}: {cut}{hint}"))
}

/// Runs `work` until `deadline` (`budget` after its start), the error
/// naming `what` when it is cut.
pub(crate) async fn by_deadline<T>(
    deadline: Instant,
    budget: Duration,
    what: &str,
    work: impl std::future::Future<Output = Result<T, OciError>>,
) -> Result<T, OciError> {
    bounded::within(deadline, budget, work, |cut| cut_error(cut, what)).await
}

impl Registry {
    /// A client for `config`, presenting `credentials`.
    pub(crate) fn new(config: RegistryConfig, credentials: Credentials) -> Result<Self, OciError> {
        let insecure = Arc::new(config.insecure.clone());
        let (hosts, plain) = (config.blob_hosts.clone(), insecure.clone());
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            let Some(first) = attempt.previous().first().cloned() else {
                return attempt.follow();
            };
            match redirect_allowed(&first, attempt.url(), &hosts, &plain) {
                Ok(()) => attempt.follow(),
                Err(why) => attempt.error(why),
            }
        });
        let mut roots = Vec::new();
        for pem in &config.roots {
            roots.push(reqwest::Certificate::from_pem(pem).map_err(|err| {
                OciError::new(rules::CONFIG, format!("reading a CA certificate: {err}"))
            })?);
        }
        let http = reqwest::Client::builder()
            .redirect(policy)
            .tls_certs_merge(roots)
            .connect_timeout(Duration::from_secs(10).min(config.request_timeout))
            .user_agent(concat!("wasm-operator/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| {
                OciError::new(
                    rules::CONFIG,
                    format!("setting up the registry client: {err}"),
                )
            })?;
        Ok(Self {
            http,
            credentials,
            insecure,
            request_timeout: config.request_timeout,
            authz: Mutex::new(HashMap::new()),
        })
    }

    fn scheme_for(&self, host: &str) -> &'static str {
        if self.insecure.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            "http"
        } else {
            "https"
        }
    }

    /// `…/v2/<repository>/<tail>` on `reference`'s registry.
    fn url(&self, reference: &OciRef, tail: &str) -> Result<Url, OciError> {
        let host = match reference.registry.as_str() {
            "docker.io" | "index.docker.io" => "registry-1.docker.io",
            other => other,
        };
        let text = format!(
            "{}://{host}/v2/{}/{tail}",
            self.scheme_for(host),
            reference.repository
        );
        Url::parse(&text).map_err(|err| {
            OciError::new(
                rules::REFERENCE,
                format!("{reference}: {text} is not a URL: {err}"),
            )
        })
    }

    fn authz_key(reference: &OciRef) -> String {
        format!("{}/{}", reference.registry, reference.repository)
    }

    /// Sends `method tail` for `reference` with the credentials the
    /// registry asks for, and returns the 2xx answer (its body unread);
    /// any other answer is an error quoting its body's excerpt. The
    /// caller's deadline bounds it (and the token request it may need).
    async fn send(
        &self,
        method: Method,
        reference: &OciRef,
        tail: &str,
        accept: &[&str],
        what: &str,
    ) -> Result<reqwest::Response, OciError> {
        let url = self.url(reference, tail)?;
        let key = Self::authz_key(reference);
        let mut retried = false;
        loop {
            let known = self.authz.lock_unpoisoned().get(&key).cloned();
            let mut request = self.http.request(method.clone(), url.clone());
            if !accept.is_empty() {
                request = request.header(header::ACCEPT, accept.join(", "));
            }
            request = match &known {
                Some(Authz::Basic(user, pass)) => request.basic_auth(user, Some(pass)),
                Some(Authz::Bearer(token)) => request.bearer_auth(token),
                None => request,
            };
            let response = request
                .send()
                .await
                .map_err(|err| transport_error(&err, what))?;
            if response.status() == StatusCode::UNAUTHORIZED && !retried {
                retried = true;
                let asked = response
                    .headers()
                    .get(header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let authz = self
                    .answer_challenge(asked.as_deref(), reference, what)
                    .await?;
                self.authz.lock_unpoisoned().insert(key.clone(), authz);
                continue;
            }
            if response.status().is_success() {
                return Ok(response);
            }
            if response.status() == StatusCode::UNAUTHORIZED {
                self.authz.lock_unpoisoned().remove(&key);
            }
            return Err(Self::status_error(response, what).await);
        }
    }

    /// An error for a non-2xx answer, quoting (escaped) the start of its body.
    async fn status_error(response: reqwest::Response, what: &str) -> OciError {
        let status = response.status();
        let rule = match status.as_u16() {
            401 | 403 => rules::AUTH,
            404 => rules::NOT_FOUND,
            _ => rules::UNREACHABLE,
        };
        let body = bounded::error_excerpt(response).await;
        let hint = match rule {
            rules::AUTH => {
                "; give the registry's credentials as a dockerconfigjson (--oci-docker-config, \
                 or the Secret the resource names)"
            }
            rules::NOT_FOUND => "; check the repository and tag (push it first)",
            _ => "",
        };
        OciError::new(rule, format!("{what}: HTTP {status}: \"{body}\"{hint}"))
    }

    /// The credentials a 401's challenge asks for.
    async fn answer_challenge(
        &self,
        asked: Option<&str>,
        reference: &OciRef,
        what: &str,
    ) -> Result<Authz, OciError> {
        let given = self.credentials.for_registry(&reference.registry);
        let refused = |why: &str| {
            OciError::new(
                rules::AUTH,
                format!(
                    "{what}: the registry asks for credentials ({why}); give them as a \
                     dockerconfigjson (--oci-docker-config, or the Secret the resource names)"
                ),
            )
        };
        let (scheme, params) = challenge(asked.unwrap_or_default());
        if let RegistryAuth::Bearer(token) = &given {
            return Ok(Authz::Bearer(token.clone()));
        }
        match scheme.as_str() {
            "basic" => match given {
                RegistryAuth::Basic(user, pass) => Ok(Authz::Basic(user, pass)),
                _ => Err(refused("Basic, and none are configured")),
            },
            "bearer" => {
                let realm = params
                    .get("realm")
                    .ok_or_else(|| refused("a Bearer challenge without a realm"))?;
                let scope = format!("repository:{}:pull", reference.repository);
                let token = self
                    .token(realm, params.get("service"), &scope, &given, what)
                    .await?;
                Ok(Authz::Bearer(token))
            }
            _ => Err(refused("no Basic or Bearer challenge")),
        }
    }

    /// A token from `realm` (the answer capped at [`MAX_TOKEN_BYTES`]).
    async fn token(
        &self,
        realm: &str,
        service: Option<&String>,
        scope: &str,
        given: &RegistryAuth,
        what: &str,
    ) -> Result<String, OciError> {
        let what = format!("{what}: the token from {realm}");
        let mut url = Url::parse(realm)
            .map_err(|err| OciError::new(rules::AUTH, format!("{what}: not a URL: {err}")))?;
        if url.scheme() == "http" && self.scheme_for(&host_port(&url)) != "http" {
            return Err(OciError::new(
                rules::AUTH,
                format!(
                    "{what}: a plain HTTP token realm is refused ({} is not named with \
                     --oci-insecure-registry)",
                    host_port(&url)
                ),
            ));
        }
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("scope", scope);
            if let Some(service) = service {
                query.append_pair("service", service);
            }
        }
        let mut request = self.http.get(url);
        if let RegistryAuth::Basic(user, pass) = given {
            request = request.basic_auth(user, Some(pass));
        }
        let response = request
            .send()
            .await
            .map_err(|err| transport_error(&err, &what))?;
        if !response.status().is_success() {
            let err = Self::status_error(response, &what).await;
            return Err(OciError::new(rules::AUTH, err.message));
        }
        let body = bounded::collect(response, MAX_TOKEN_BYTES)
            .await
            .map_err(|cut| cut_error(cut, &what))?;
        let answer: TokenAnswer = serde_json::from_slice(&body).map_err(|err| {
            OciError::new(
                rules::AUTH,
                format!(
                    "{what}: not a token answer ({err}): \"{}\"",
                    bounded::excerpt(&body[..body.len().min(bounded::ERROR_READ as usize)])
                ),
            )
        })?;
        answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| OciError::new(rules::AUTH, format!("{what}: the answer has no token")))
    }

    /// The request deadline, or the pull's if that comes first.
    pub(crate) fn deadline(&self, pull: Option<Instant>) -> Instant {
        bounded::deadline_in(self.request_timeout, pull)
    }

    /// The manifest digest `reference` names now: a `HEAD`'s
    /// `Docker-Content-Digest`, else the sha256 of the manifest's bytes
    /// (a `GET`, capped). Within one request deadline.
    pub(crate) async fn manifest_digest(
        &self,
        reference: &OciRef,
        tail: &str,
        accept: &[&str],
        what: &str,
    ) -> Result<String, OciError> {
        let work = async {
            let head = self
                .send(Method::HEAD, reference, tail, accept, what)
                .await?;
            let header = head
                .headers()
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            drop(head);
            if let Some(digest) = header {
                return Ok(digest);
            }
            let answer = self
                .send(Method::GET, reference, tail, accept, what)
                .await?;
            let bytes = bounded::collect(answer, MAX_MANIFEST_BYTES)
                .await
                .map_err(|cut| cut_error(cut, &format!("{what} (the manifest)")))?;
            Ok(super::sha256_digest(&bytes))
        };
        by_deadline(self.deadline(None), self.request_timeout, what, work).await
    }

    /// The body of `GET tail`, at most `cap` bytes, within a request
    /// deadline (or the pull's `pull_deadline`, if sooner).
    pub(crate) async fn get_bytes(
        &self,
        reference: &OciRef,
        tail: &str,
        accept: &[&str],
        cap: u64,
        what: &str,
        pull_deadline: Option<Instant>,
    ) -> Result<Vec<u8>, OciError> {
        let work = async {
            let answer = self
                .send(Method::GET, reference, tail, accept, what)
                .await?;
            bounded::collect(answer, cap)
                .await
                .map_err(|cut| cut_error(cut, what))
        };
        let deadline = self.deadline(pull_deadline);
        by_deadline(deadline, self.request_timeout, what, work).await
    }

    /// Streams the body of `GET tail` to `each`, at most `cap` bytes, by
    /// `deadline` (a blob: the pull's deadline).
    pub(crate) async fn get_stream(
        &self,
        reference: &OciRef,
        tail: &str,
        cap: u64,
        what: &str,
        (deadline, budget): (Instant, Duration),
        each: impl FnMut(&[u8]),
    ) -> Result<u64, OciError> {
        let work = async {
            let answer = self.send(Method::GET, reference, tail, &[], what).await?;
            bounded::stream(answer, cap, each)
                .await
                .map_err(|cut| cut_error(cut, what))
        };
        by_deadline(deadline, budget, what, work).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("url")
    }

    #[test]
    fn redirects_stay_on_the_origin_or_go_to_named_blob_hosts() {
        let first = url("https://reg.example/v2/p/blobs/sha256:a");
        let blob = vec!["blobs.example".to_string()];
        let plain = vec!["plain.example:5000".to_string()];
        assert!(redirect_allowed(&first, &url("https://reg.example/other"), &blob, &plain).is_ok());
        assert!(redirect_allowed(&first, &url("https://blobs.example/x"), &blob, &plain).is_ok());
        for refused in [
            "https://elsewhere.example/x",
            "http://reg.example/x",
            "https://reg.example:8443/x",
            "http://blobs.example/x",
            "file:///etc/passwd",
        ] {
            assert!(
                redirect_allowed(&first, &url(refused), &blob, &plain).is_err(),
                "{refused}"
            );
        }
        let insecure = url("http://plain.example:5000/v2/p/blobs/x");
        assert!(
            redirect_allowed(&insecure, &url("http://plain.example:5000/y"), &[], &plain).is_ok()
        );
        assert!(
            redirect_allowed(&insecure, &url("http://plain.example:6000/y"), &[], &plain).is_err()
        );
    }

    #[test]
    fn challenges_parse() {
        let (scheme, params) = challenge(
            r#"Bearer realm="https://auth.example/token",service="reg.example",scope="repository:p:pull""#,
        );
        assert_eq!(scheme, "bearer");
        assert_eq!(params["realm"], "https://auth.example/token");
        assert_eq!(params["service"], "reg.example");
        let (scheme, params) = challenge(r#"Basic realm="Registry Realm""#);
        assert_eq!(scheme, "basic");
        assert_eq!(params["realm"], "Registry Realm");
    }
}
