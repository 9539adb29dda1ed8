//! The web dashboard (docs/API.md, "Dashboard"): the single-page application built from `web/`
//! by `scripts/build_web.sh`, whose output (`router/assets/dashboard/`) is committed and
//! embedded here, so the binary serves it without Node.js.
//!
//! - `/assets/{file}`: content-hashed files, cached for a year (`immutable`), gzip when the
//!   client accepts it (compressed once, on first use).
//! - `/` and the application's own paths (`CLIENT_ROUTES`: `/traces`, `/traces/{id}`, …):
//!   `index.html`, never cached, with a Content-Security-Policy. Only those paths: an unknown
//!   path anywhere else, API or not, keeps its JSON 404.

mod assets;

use std::io::Write;
use std::sync::{Arc, OnceLock};

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::http::error::ApiError;
use crate::AppState;

pub use assets::{CLIENT_ROUTES, SOURCE_HASH};

/// One embedded file of the build.
pub struct Asset {
    /// File name under `/assets/` (`index.html` is served at `/` instead).
    pub name: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
}

/// What the HTML may load and talk to: only its own origin (the API is same-origin), inline
/// styles (charts and the replay player set them), images also from elsewhere and `data:`
/// (replayed pages show theirs). No inline or foreign scripts, no framing of the dashboard.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self' 'unsafe-inline'; img-src * data: blob:; font-src 'self' data:; connect-src 'self'; \
frame-src 'self' blob:; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The dashboard's routes, to merge into the public route table.
pub fn routes() -> Router<Arc<AppState>> {
    let mut r = Router::new().route("/", get(index)).route("/assets/{file}", get(asset));
    for seg in CLIENT_ROUTES {
        r = r.route(&format!("/{seg}"), get(index)).route(&format!("/{seg}/{{*rest}}"), get(index));
    }
    r
}

/// Whether a route pattern of the public table is the dashboard's (HTML and static files, no
/// API): for checks that every API route is described (OpenAPI).
pub fn is_dashboard_route(pattern: &str) -> bool {
    if pattern == "/" || pattern == "/assets/{file}" {
        return true;
    }
    let first = pattern.trim_start_matches('/').split('/').next().unwrap_or("");
    CLIENT_ROUTES.contains(&first)
        && (pattern == format!("/{first}") || pattern == format!("/{first}/{{*rest}}"))
}

fn find(name: &str) -> Option<(usize, &'static Asset)> {
    assets::FILES.iter().enumerate().find(|(_, a)| a.name == name)
}

async fn index(headers: HeaderMap) -> Response {
    let Some((i, html)) = find("index.html") else {
        return ApiError::NotFound("the dashboard is not built".into()).into_response();
    };
    let mut resp = body(i, html, &headers);
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match find(&file).filter(|(_, a)| a.name != "index.html") {
        Some((i, a)) => {
            let mut resp = body(i, a, &headers);
            resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
            resp
        }
        None => ApiError::NotFound("no such asset".into()).into_response(),
    }
}

/// The file, gzip-compressed when the client takes gzip and that is smaller.
fn body(i: usize, a: &'static Asset, headers: &HeaderMap) -> Response {
    let mut resp = match gzipped(i, a) {
        Some(gz) if accepts_gzip(headers) => {
            let mut r = (StatusCode::OK, gz).into_response();
            r.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            r
        }
        _ => (StatusCode::OK, a.bytes).into_response(),
    };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    resp
}

/// Whether `Accept-Encoding` lists gzip (or `*`) without refusing it with `q=0`.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            let mut parts = e.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                p.trim().strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()).is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

/// The gzip form of file `i`, made once; `None` when it would not be smaller.
fn gzipped(i: usize, a: &'static Asset) -> Option<&'static [u8]> {
    static GZ: OnceLock<Vec<OnceLock<Option<Vec<u8>>>>> = OnceLock::new();
    let cells = GZ.get_or_init(|| assets::FILES.iter().map(|_| OnceLock::new()).collect());
    cells[i]
        .get_or_init(|| {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            enc.write_all(a.bytes).ok()?;
            let gz = enc.finish().ok()?;
            (gz.len() < a.bytes.len()).then_some(gz)
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use sha2::{Digest, Sha256};

    use super::*;

    /// The files of `web/` the build reads: everything but `node_modules/` and the browser
    /// tests (`e2e/`), as `web/scripts/manifest.mjs` hashes them.
    fn source_files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
        for entry in std::fs::read_dir(dir).expect("read web/") {
            let path = entry.expect("dir entry").path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            if rel == "node_modules" || rel == "e2e" {
                continue;
            }
            if path.is_dir() {
                source_files(root, &path, out);
            } else {
                out.push((rel, path));
            }
        }
    }

    /// SHA-256 over each file's relative path, length and bytes, in byte order of the paths.
    fn hash_of_web_sources() -> String {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web");
        let mut files = Vec::new();
        source_files(&root, &root, &mut files);
        files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut h = Sha256::new();
        for (rel, path) in files {
            let bytes = std::fs::read(&path).expect("read source");
            h.update(format!("{rel}\n{}\n", bytes.len()).as_bytes());
            h.update(&bytes);
        }
        hex::encode(h.finalize())
    }

    #[test]
    fn committed_dashboard_build_matches_the_web_sources() {
        assert_eq!(
            SOURCE_HASH,
            hash_of_web_sources(),
            "router/assets/dashboard is stale: web/ changed since it was built; run scripts/build_web.sh and commit"
        );
    }

    #[test]
    fn committed_dashboard_has_only_the_files_of_its_manifest() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/dashboard");
        let mut on_disk = Vec::new();
        source_files(&dir, &dir, &mut on_disk);
        let mut on_disk: Vec<String> =
            on_disk.into_iter().map(|(rel, _)| rel.strip_prefix("assets/").unwrap_or(&rel).to_owned()).collect();
        let mut listed: Vec<String> = assets::FILES.iter().map(|a| a.name.to_owned()).collect();
        on_disk.sort();
        listed.sort();
        assert_eq!(on_disk, listed);
        assert!(listed.iter().any(|n| n == "index.html"));
    }

    #[test]
    fn assets_have_content_hashed_names_and_known_types() {
        for a in assets::FILES.iter().filter(|a| a.name != "index.html") {
            let stem = a.name.rsplit_once('.').map_or(a.name, |(s, _)| s);
            let hash = stem.rsplit_once('-').map_or("", |(_, h)| h);
            assert!(hash.len() >= 8, "{} has no content hash in its name", a.name);
            assert!(!a.content_type.starts_with("application/octet-stream"), "{}", a.name);
        }
    }

    #[test]
    fn gzip_is_sent_only_to_clients_that_take_it() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, v.parse().unwrap());
            accepts_gzip(&h)
        };
        assert!(with("gzip"));
        assert!(with("br, GZIP;q=0.8"));
        assert!(with("*"));
        assert!(!with("gzip;q=0"));
        assert!(!with("gzip; q=0.000, br"));
        assert!(!with("identity"));
        assert!(!with("x-gzip-ish"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn dashboard_routes_never_take_api_or_capture_paths() {
        for seg in CLIENT_ROUTES {
            for reserved in ["api", "auth", "v1", "billing", "projects", "admin", "batch", "e", "capture", "i", "healthz", "readyz", "metrics", "openapi.json", "assets"] {
                assert_ne!(*seg, reserved);
            }
        }
        assert!(is_dashboard_route("/traces/{*rest}"));
        assert!(!is_dashboard_route("/api/v1/traces"));
        assert!(!is_dashboard_route("/v1/batch"));
    }
}
