//! Where webhooks may be sent (docs/API.md, "Webhooks", "Targets"): no server-side request
//! forgery. Every address a delivery would connect to is classified; the HTTP client resolves
//! names through [`GuardedResolver`], which hands the connector only permitted addresses, so a
//! name that resolves to a public address when checked and to a private one when connecting
//! (DNS rebinding) is never connected to its second answer: there is no second resolution.
//! Literal addresses in URLs are checked before sending, redirects are not followed, and no
//! proxy is used.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;
use sextant_model::webhook::{DELIVERY_TIMEOUT_MS, MAX_URL_LEN};

/// What a router permits beyond public HTTPS targets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Loopback, private (RFC 1918, unique local) and shared (CGNAT) addresses.
    pub allow_private: bool,
    /// `http://` URLs.
    pub allow_http: bool,
}

impl TargetPolicy {
    /// `sextant dev`: a laptop, where receivers run on loopback or the local network.
    pub fn dev() -> Self {
        TargetPolicy { allow_private: true, allow_http: true }
    }
}

/// What an address is, as far as sending to it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrClass {
    Public,
    /// Loopback, private, unique local or shared address space: allowed by configuration.
    Private,
    /// Never: unspecified, link-local (cloud metadata lives there), multicast, broadcast,
    /// documentation and reserved ranges, and the metadata addresses.
    Forbidden,
}

/// AWS's IPv6 instance metadata address.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

pub fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let [a, b, c, _] = ip.octets();
    let forbidden = ip.is_unspecified()
        || a == 0
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a >= 240
        || ip.is_documentation()
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b & 0xfe) == 18);
    if forbidden {
        return AddrClass::Forbidden;
    }
    let cgnat = a == 100 && (b & 0xc0) == 64;
    if ip.is_loopback() || ip.is_private() || cgnat {
        return AddrClass::Private;
    }
    AddrClass::Public
}

fn classify_v6(ip: Ipv6Addr) -> AddrClass {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let seg = ip.segments();
    // NAT64 (64:ff9b::/96) reaches the embedded IPv4 address.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [a, b] = seg[6].to_be_bytes();
        let [c, d] = seg[7].to_be_bytes();
        return classify_v4(Ipv4Addr::new(a, b, c, d));
    }
    let forbidden = ip.is_unspecified()
        || ip == METADATA_V6
        || (seg[0] & 0xffc0) == 0xfe80 // link-local
        || (seg[0] & 0xff00) == 0xff00 // multicast
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
        || seg[..6] == [0, 0, 0, 0, 0, 0]; // IPv4-compatible (deprecated), :: and ::1 aside
    if ip.is_loopback() {
        return AddrClass::Private;
    }
    if forbidden {
        return AddrClass::Forbidden;
    }
    if (seg[0] & 0xfe00) == 0xfc00 {
        return AddrClass::Private; // unique local
    }
    AddrClass::Public
}

/// Why a target is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the URL is not valid: {0}")]
    Invalid(String),
    #[error("the URL is longer than {MAX_URL_LEN} bytes")]
    TooLong,
    #[error("only https URLs are allowed")]
    NotHttps,
    #[error("URLs with a user name or password are not allowed")]
    Credentials,
    #[error("{0} is a private or loopback address; this server does not send webhooks to those")]
    Private(String),
    #[error("{0} is an address webhooks are never sent to")]
    Forbidden(String),
    #[error("{0} does not resolve to any address webhooks may be sent to")]
    NoPermittedAddress(String),
}

impl TargetPolicy {
    pub fn permits(&self, ip: IpAddr) -> Result<(), Refused> {
        match classify(ip) {
            AddrClass::Public => Ok(()),
            AddrClass::Private if self.allow_private => Ok(()),
            AddrClass::Private => Err(Refused::Private(ip.to_string())),
            AddrClass::Forbidden => Err(Refused::Forbidden(ip.to_string())),
        }
    }

    /// The addresses of `host` a connection may use: the permitted ones of `found`, so a name
    /// that also resolves to a refused address (a rebinding trick with several records) is
    /// only ever connected to its permitted ones.
    pub fn permitted(&self, host: &str, found: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, Refused> {
        let permitted: Vec<SocketAddr> = found.into_iter().filter(|a| self.permits(a.ip()).is_ok()).collect();
        if permitted.is_empty() {
            return Err(Refused::NoPermittedAddress(host.to_owned()));
        }
        Ok(permitted)
    }

    /// Checks what can be checked without resolving: scheme, length, credentials, literal
    /// addresses and `localhost` names.
    pub fn check_url(&self, raw: &str) -> Result<Url, Refused> {
        if raw.len() > MAX_URL_LEN {
            return Err(Refused::TooLong);
        }
        let url = Url::parse(raw).map_err(|e| Refused::Invalid(e.to_string()))?;
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            _ => return Err(Refused::NotHttps),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refused::Credentials);
        }
        // The parser has already normalised literal addresses (`2130706433`, `0x7f.1`).
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| Refused::Invalid("no host".into()))?;
        let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            self.permits(ip)?;
        } else {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            if !self.allow_private && (name == "localhost" || name.ends_with(".localhost")) {
                return Err(Refused::Private(name));
            }
        }
        Ok(url)
    }
}

/// Resolves with the system resolver and keeps only the addresses `policy` permits.
pub struct GuardedResolver {
    pub policy: TargetPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let permitted = policy.permitted(&host, found)?;
            Ok(Box::new(permitted.into_iter()) as Addrs)
        })
    }
}

/// The client every delivery is sent with: guarded resolution, no redirects, no proxy, the
/// delivery timeout.
pub fn client(policy: TargetPolicy) -> reqwest::Client {
    let timeout = Duration::from_millis(u64::try_from(DELIVERY_TIMEOUT_MS).unwrap_or(10_000));
    reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver { policy }))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .https_only(!policy.allow_http)
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent("Sextant-Webhooks/1")
        .build()
        .expect("the webhook HTTP client's settings are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> AddrClass {
        classify(s.parse().unwrap())
    }

    #[test]
    fn addresses_are_classified_by_range() {
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "100.128.0.1", "172.32.0.1"] {
            assert_eq!(class(public), AddrClass::Public, "{public}");
        }
        for private in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "::ffff:10.0.0.1",
        ] {
            assert_eq!(class(private), AddrClass::Private, "{private}");
        }
        for forbidden in [
            "169.254.169.254",
            "fd00:ec2::254",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "fe80::1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::127.0.0.1",
            "192.0.0.8",
            "198.18.0.1",
        ] {
            assert_eq!(class(forbidden), AddrClass::Forbidden, "{forbidden}");
        }
        assert_eq!(class("64:ff9b::808:808"), AddrClass::Public);
    }

    #[test]
    fn routers_refuse_plain_http_private_literals_and_localhost_names() {
        let strict = TargetPolicy::default();
        assert!(strict.check_url("https://hooks.example.com/x").is_ok());
        assert_eq!(strict.check_url("http://hooks.example.com/x"), Err(Refused::NotHttps));
        assert_eq!(strict.check_url("ftp://hooks.example.com/x"), Err(Refused::NotHttps));
        assert!(matches!(strict.check_url("https://127.0.0.1/x"), Err(Refused::Private(_))));
        assert!(matches!(strict.check_url("https://[::1]:8443/x"), Err(Refused::Private(_))));
        assert!(matches!(strict.check_url("https://localhost/x"), Err(Refused::Private(_))));
        assert!(matches!(strict.check_url("https://api.LOCALHOST./x"), Err(Refused::Private(_))));
        assert!(matches!(strict.check_url("https://169.254.169.254/latest"), Err(Refused::Forbidden(_))));
        assert!(matches!(strict.check_url("https://[fd00:ec2::254]/latest"), Err(Refused::Forbidden(_))));
        // Obfuscated literals are normalised by the URL parser first.
        assert!(matches!(strict.check_url("https://2130706433/x"), Err(Refused::Private(_))));
        assert!(matches!(strict.check_url("https://0x7f.1/x"), Err(Refused::Private(_))));
        assert_eq!(strict.check_url("https://u:p@hooks.example.com/"), Err(Refused::Credentials));
        assert_eq!(strict.check_url(&format!("https://a.test/{}", "x".repeat(MAX_URL_LEN))), Err(Refused::TooLong));
        let dev = TargetPolicy::dev();
        assert!(dev.check_url("http://127.0.0.1:9000/hook").is_ok());
        assert!(dev.check_url("http://localhost:9000/hook").is_ok());
        assert!(matches!(dev.check_url("http://169.254.169.254/"), Err(Refused::Forbidden(_))), "never metadata");
    }

    #[test]
    fn only_the_permitted_addresses_of_a_name_are_connected_to() {
        let addrs = |list: &[&str]| list.iter().map(|a| a.parse::<SocketAddr>().unwrap()).collect::<Vec<_>>();
        let strict = TargetPolicy::default();
        let mixed = addrs(&["127.0.0.1:443", "93.184.216.34:443", "[fd00:ec2::254]:443", "10.0.0.1:443"]);
        assert_eq!(strict.permitted("rebind.test", mixed.clone()), Ok(addrs(&["93.184.216.34:443"])));
        assert_eq!(
            strict.permitted("rebind.test", addrs(&["127.0.0.1:443", "169.254.169.254:80"])),
            Err(Refused::NoPermittedAddress("rebind.test".into()))
        );
        let dev = TargetPolicy::dev();
        assert_eq!(
            dev.permitted("rebind.test", mixed),
            Ok(addrs(&["127.0.0.1:443", "93.184.216.34:443", "10.0.0.1:443"]))
        );
    }

    #[tokio::test]
    async fn the_resolver_drops_addresses_the_policy_refuses() {
        let strict = GuardedResolver { policy: TargetPolicy::default() };
        let err = strict.resolve("localhost".parse().unwrap()).await.err().expect("refused");
        assert!(err.to_string().contains("does not resolve to any address"), "{err}");
        let dev = GuardedResolver { policy: TargetPolicy::dev() };
        let addrs: Vec<SocketAddr> = dev.resolve("localhost".parse().unwrap()).await.unwrap().collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }
}
