//! Certificates of mutual TLS on internal gRPC (`spec.internalTls`, docs/KUBERNETES.md, "TLS"):
//! a cluster CA the operator creates once (Secret `NAME-internal-ca`, mounted nowhere) and one
//! certificate for all nodes and one for all routers (Secrets `NAME-node-tls`, `NAME-router-tls`
//! with `tls.crt`, `tls.key` and `ca.crt`), issued again well before they expire. Both serve
//! as server and client certificates. The node certificate names every node through the
//! headless Service (`*.NAME-node.NAMESPACE.svc`), which is how nodes and routers dial them.
//!
//! The CA is replaced a year before it expires, or when asked, in steps that never leave two
//! pods without a CA in common ([`Authority`]): the new CA is trusted everywhere first, then
//! signs the certificates, then the old one is dropped.

use k8s_openapi::api::core::v1::{EnvVar, PodSpec, Secret, SecretVolumeSource, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};

use sextant_model::peer::PeerRole;

use crate::topology::{labels, Names, TopologyError};
use crate::v1alpha1::{InternalTlsMode, SextantCluster};

/// Where the component's Secret is mounted; `sextant node` and `sextant router` find it through
/// `SEXTANT_INTERNAL_TLS_DIR`.
pub const INTERNAL_TLS_DIR: &str = "/etc/sextant/internal-tls";
const VOLUME: &str = "internal-tls";
const DIR_ENV: &str = "SEXTANT_INTERNAL_TLS_DIR";
const MODE_ENV: &str = "SEXTANT_INTERNAL_TLS_MODE";

/// Keys of the Secrets.
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";

const CA_VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 3650);
/// A CA with less than this left is replaced ([`Authority::step`]).
pub const CA_RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(24 * 365);
/// How long each step of a CA rotation gives every pod to see the Secrets it changed: the
/// kubelet refreshes mounted Secrets within about two minutes, processes reread them every 5 s.
pub const TRUST_PROPAGATION: SignedDuration = SignedDuration::from_mins(10);
/// Keys of the CA Secret during a rotation.
const NEXT_CRT: &str = "next.crt";
const NEXT_KEY: &str = "next.key";
const PREVIOUS_CRT: &str = "previous.crt";
/// CA Secret annotation: when the rotation's current step began.
const STEP_SINCE: &str = "sextant.dev/ca-step-since";
/// CA Secret annotation: the last value of [`ROTATE_ANNOTATION`] acted on.
const ROTATED_FOR: &str = "sextant.dev/ca-rotated-for";
/// A `SextantCluster` annotation: a new value starts a rotation of the internal CA.
pub const ROTATE_ANNOTATION: &str = "sextant.dev/rotate-internal-ca";
const LEAF_VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 90);
/// A certificate with less than this left is issued again.
pub const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(24 * 30);
/// Certificates are valid from a little before they are made: clocks of nodes differ.
const BACKDATE: SignedDuration = SignedDuration::from_hours(1);

fn issue_error(e: impl std::fmt::Display) -> TopologyError {
    TopologyError::InternalTls(e.to_string())
}

fn asn1_time(t: Timestamp) -> Result<time::OffsetDateTime, TopologyError> {
    time::OffsetDateTime::from_unix_timestamp(t.as_second()).map_err(issue_error)
}

/// Which certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaf {
    Node,
    Router,
}

impl Leaf {
    pub const ALL: [Leaf; 2] = [Leaf::Node, Leaf::Router];

    pub fn secret(self, names: &Names) -> String {
        match self {
            Leaf::Node => format!("{}-node-tls", names.cluster),
            Leaf::Router => format!("{}-router-tls", names.cluster),
        }
    }

    /// DNS names in the certificate: every node by its headless-Service name (how peers and
    /// routers dial them, `Names::node_address`); the routers' Service for routers, which are
    /// only ever clients.
    pub fn dns_names(self, names: &Names) -> Vec<String> {
        let ns = &names.namespace;
        let service = match self {
            Leaf::Node => names.nodes(),
            Leaf::Router => names.routers(),
        };
        let mut out = vec![format!("{service}.{ns}.svc"), format!("{service}.{ns}.svc.cluster.local")];
        if self == Leaf::Node {
            out.extend([format!("*.{service}.{ns}.svc"), format!("*.{service}.{ns}.svc.cluster.local")]);
        }
        out
    }

    fn component(self) -> &'static str {
        match self {
            Leaf::Node => "node",
            Leaf::Router => "router",
        }
    }

    /// The role its URI name gives it: what nodes let it call.
    pub fn role(self) -> PeerRole {
        match self {
            Leaf::Node => PeerRole::Node,
            Leaf::Router => PeerRole::Router,
        }
    }
}

/// The cluster CA, as PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ca {
    pub cert_pem: String,
    pub key_pem: String,
}

fn value(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .or_else(|| secret.string_data.as_ref().and_then(|d| d.get(key).cloned()))
        .filter(|v| !v.is_empty())
}

impl Ca {
    pub fn issue(names: &Names, now: Timestamp) -> Result<Ca, TopologyError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(issue_error)?;
        params.distinguished_name.push(DnType::CommonName, format!("sextant {} internal CA", names.cluster));
        params.distinguished_name.push(DnType::OrganizationalUnitName, names.namespace.clone());
        // Signs leaf certificates only.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_before = asn1_time(now - BACKDATE)?;
        params.not_after = asn1_time(now + CA_VALIDITY)?;
        let key = KeyPair::generate().map_err(issue_error)?;
        let cert = params.self_signed(&key).map_err(issue_error)?;
        Ok(Ca { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    fn from_keys(secret: &Secret, crt: &str, key: &str) -> Option<Ca> {
        Some(Ca { cert_pem: value(secret, crt)?, key_pem: value(secret, key)? })
    }

    /// When the CA certificate expires; `None` when it cannot be read.
    fn expires(&self) -> Option<Timestamp> {
        read_certificate(&self.cert_pem, |x509| Timestamp::from_second(x509.validity().not_after.timestamp()).ok())?
    }

    /// A fresh key and a certificate for it: `(tls.crt, tls.key)`.
    pub fn leaf(&self, names: &Names, leaf: Leaf, now: Timestamp) -> Result<(String, String), TopologyError> {
        let ca_key = KeyPair::from_pem(&self.key_pem).map_err(issue_error)?;
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, ca_key).map_err(issue_error)?;
        let mut params = CertificateParams::new(leaf.dns_names(names)).map_err(issue_error)?;
        params.subject_alt_names.push(SanType::URI(leaf.role().uri().try_into().map_err(issue_error)?));
        params.distinguished_name.push(DnType::CommonName, format!("{}.{}", leaf.secret(names), names.namespace));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = asn1_time(now - BACKDATE)?;
        params.not_after = asn1_time(now + LEAF_VALIDITY)?;
        let key = KeyPair::generate().map_err(issue_error)?;
        let cert = params.signed_by(&key, &issuer).map_err(issue_error)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// The CA state of a cluster, kept in its CA Secret. Each step of a rotation lasts at least
/// [`TRUST_PROPAGATION`] after the component Secrets last changed, so that every pod has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authority {
    /// One CA signs and is trusted.
    Steady { ca: Ca },
    /// A new CA is trusted beside the signing one, which still signs.
    Introducing { ca: Ca, next: Ca, since: Timestamp },
    /// The new CA signs; the old one (`previous`, a certificate) is still trusted.
    Retiring { ca: Ca, previous: String, since: Timestamp },
}

/// A change of the CA Secret, and why (for the event).
pub struct Step {
    pub authority: Authority,
    pub why: String,
}

impl Authority {
    /// Reads the CA Secret; `Err` names a key that is missing or empty.
    pub fn from_secret(secret: &Secret) -> Result<Authority, &'static str> {
        let ca = Ca::from_keys(secret, CA_CRT, CA_KEY).ok_or(CA_KEY)?;
        let since = || {
            let at = secret.metadata.annotations.as_ref().and_then(|a| a.get(STEP_SINCE));
            at.and_then(|t| t.parse::<Timestamp>().ok()).ok_or(STEP_SINCE)
        };
        if value(secret, NEXT_CRT).is_some() {
            let next = Ca::from_keys(secret, NEXT_CRT, NEXT_KEY).ok_or(NEXT_KEY)?;
            return Ok(Authority::Introducing { ca, next, since: since()? });
        }
        if let Some(previous) = value(secret, PREVIOUS_CRT) {
            return Ok(Authority::Retiring { ca, previous, since: since()? });
        }
        Ok(Authority::Steady { ca })
    }

    /// The CA that signs component certificates now.
    pub fn signing(&self) -> &Ca {
        match self {
            Authority::Steady { ca } | Authority::Introducing { ca, .. } | Authority::Retiring { ca, .. } => ca,
        }
    }

    /// `ca.crt` of the component Secrets: every CA a peer's certificate may chain to.
    pub fn trust_bundle(&self) -> String {
        let pems = match self {
            Authority::Steady { ca } => vec![ca.cert_pem.as_str()],
            Authority::Introducing { ca, next, .. } => vec![ca.cert_pem.as_str(), next.cert_pem.as_str()],
            Authority::Retiring { ca, previous, .. } => vec![ca.cert_pem.as_str(), previous.as_str()],
        };
        pems.iter().map(|p| format!("{}\n", p.trim_end())).collect()
    }

    /// The same step, begun again at `now`: the component Secrets changed during it.
    pub fn restarted(self, now: Timestamp) -> Authority {
        match self {
            Authority::Introducing { ca, next, .. } => Authority::Introducing { ca, next, since: now },
            Authority::Retiring { ca, previous, .. } => Authority::Retiring { ca, previous, since: now },
            steady => steady,
        }
    }

    /// The next step of a rotation due at `now`, if any. A rotation starts when the CA has less
    /// than [`CA_RENEW_BEFORE`] left, or when `requested`.
    pub fn step(&self, names: &Names, now: Timestamp, requested: bool) -> Result<Option<Step>, TopologyError> {
        let settled = |since: &Timestamp| now >= *since + TRUST_PROPAGATION;
        Ok(match self {
            Authority::Steady { ca } => {
                let expires = ca.expires();
                let due = expires.is_none_or(|at| at < now + CA_RENEW_BEFORE);
                if !due && !requested {
                    return Ok(None);
                }
                let why = match expires {
                    _ if !due => "a rotation was requested".to_owned(),
                    Some(at) => format!("the internal CA expires at {at}"),
                    None => "the internal CA certificate is unreadable".to_owned(),
                };
                Some(Step {
                    authority: Authority::Introducing { ca: ca.clone(), next: Ca::issue(names, now)?, since: now },
                    why: format!("{why}: a new CA is trusted beside it"),
                })
            }
            Authority::Introducing { ca, next, since } if settled(since) => Some(Step {
                authority: Authority::Retiring { ca: next.clone(), previous: ca.cert_pem.clone(), since: now },
                why: "every pod trusts the new CA: it signs the certificates now".into(),
            }),
            Authority::Retiring { ca, since, .. } if settled(since) => Some(Step {
                authority: Authority::Steady { ca: ca.clone() },
                why: "every pod has a certificate of the new CA: the old one is no longer trusted".into(),
            }),
            Authority::Introducing { .. } | Authority::Retiring { .. } => None,
        })
    }
}

/// `NAME-internal-ca`: the CA certificate and its key, and during a rotation the other CA and
/// when the step began. `rotated_for` is the rotation request last acted on.
pub fn ca_secret(
    cluster: &SextantCluster,
    authority: &Authority,
    rotated_for: Option<&str>,
) -> Result<Secret, TopologyError> {
    let names = Names::of(cluster)?;
    let mut metadata = metadata(cluster, &names, names.internal_ca(), "internal-ca")?;
    let ca = authority.signing();
    let mut data: std::collections::BTreeMap<String, String> =
        [(CA_CRT.to_owned(), ca.cert_pem.clone()), (CA_KEY.to_owned(), ca.key_pem.clone())].into();
    let mut annotations = std::collections::BTreeMap::new();
    match authority {
        Authority::Steady { .. } => {}
        Authority::Introducing { next, since, .. } => {
            data.insert(NEXT_CRT.into(), next.cert_pem.clone());
            data.insert(NEXT_KEY.into(), next.key_pem.clone());
            annotations.insert(STEP_SINCE.to_owned(), since.to_string());
        }
        Authority::Retiring { previous, since, .. } => {
            data.insert(PREVIOUS_CRT.into(), previous.clone());
            annotations.insert(STEP_SINCE.to_owned(), since.to_string());
        }
    }
    if let Some(request) = rotated_for {
        annotations.insert(ROTATED_FOR.to_owned(), request.to_owned());
    }
    metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    Ok(Secret { metadata, type_: Some("Opaque".into()), string_data: Some(data), ..Secret::default() })
}

/// The rotation request the CA Secret says was acted on last.
pub fn rotated_for(secret: &Secret) -> Option<&str> {
    secret.metadata.annotations.as_ref()?.get(ROTATED_FOR).map(String::as_str)
}

fn metadata(
    cluster: &SextantCluster,
    names: &Names,
    name: String,
    component: &str,
) -> Result<ObjectMeta, TopologyError> {
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(names.namespace.clone()),
        labels: Some(labels(names, component)),
        owner_references: Some(vec![cluster
            .controller_owner_ref(&())
            .ok_or(TopologyError::Missing("metadata.uid"))?]),
        ..ObjectMeta::default()
    })
}

/// A component's Secret: its certificate and key, and the CAs to verify peers with.
pub fn leaf_secret(
    cluster: &SextantCluster,
    leaf: Leaf,
    (cert, key): (String, String),
    trust: String,
) -> Result<Secret, TopologyError> {
    let names = Names::of(cluster)?;
    Ok(Secret {
        metadata: metadata(cluster, &names, leaf.secret(&names), leaf.component())?,
        type_: Some("kubernetes.io/tls".into()),
        string_data: Some([(TLS_CRT.to_owned(), cert), (TLS_KEY.to_owned(), key), (CA_CRT.to_owned(), trust)].into()),
        ..Secret::default()
    })
}

/// What a component's Secret needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafAction {
    /// A new certificate, for this reason.
    Issue(&'static str),
    /// The same certificate and key with the CAs trusted now.
    Trust,
    Keep,
}

/// The key identifier of `pem`'s own key (a CA's subject key identifier) or of its issuer's
/// (a certificate's authority key identifier).
fn key_id(x509: &x509_parser::certificate::X509Certificate<'_>, own: bool) -> Option<Vec<u8>> {
    use x509_parser::extensions::ParsedExtension;
    x509.extensions().iter().find_map(|e| match e.parsed_extension() {
        ParsedExtension::SubjectKeyIdentifier(id) if own => Some(id.0.to_vec()),
        ParsedExtension::AuthorityKeyIdentifier(aki) if !own => aki.key_identifier.as_ref().map(|id| id.0.to_vec()),
        _ => None,
    })
}

/// `f` of the certificate in `pem`; `None` when it cannot be read.
fn read_certificate<T>(pem: &str, f: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T) -> Option<T> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    Some(f(&pem.parse_x509().ok()?))
}

/// Whether a component's Secret must be issued again, or only trust other CAs, under
/// `authority` at `now`.
pub fn leaf_action(
    existing: Option<&Secret>,
    authority: &Authority,
    names: &Names,
    leaf: Leaf,
    now: Timestamp,
) -> LeafAction {
    let Some(secret) = existing else { return LeafAction::Issue("missing") };
    let (Some(cert), Some(_key), Some(trusted)) =
        (value(secret, TLS_CRT), value(secret, TLS_KEY), value(secret, CA_CRT))
    else {
        return LeafAction::Issue("incomplete");
    };
    let signer = read_certificate(&authority.signing().cert_pem, |ca| key_id(ca, true)).flatten();
    let action = read_certificate(&cert, |x509| {
        if signer.is_none() || key_id(x509, false) != signer {
            return LeafAction::Issue("not of the cluster CA");
        }
        let expires = x509.validity().not_after.timestamp();
        if expires.saturating_sub(now.as_second()) < RENEW_BEFORE.as_secs() {
            return LeafAction::Issue("expiring");
        }
        let mut named: Vec<String> = match x509.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    x509_parser::extensions::GeneralName::URI(u) => Some(u.to_string()),
                    _ => None,
                })
                .collect(),
            _ => vec![],
        };
        let mut want = leaf.dns_names(names);
        want.push(leaf.role().uri().to_owned());
        named.sort();
        want.sort();
        if named != want {
            return LeafAction::Issue("names changed");
        }
        if trusted.trim() != authority.trust_bundle().trim() {
            return LeafAction::Trust;
        }
        LeafAction::Keep
    });
    action.unwrap_or(LeafAction::Issue("unreadable"))
}

/// The component Secret `authority` wants at `now` in place of `existing`, and why; `None`
/// when `existing` is current. A certificate that is still good keeps its key and only gets
/// the CAs trusted now.
pub fn renewed_leaf_secret(
    cluster: &SextantCluster,
    existing: Option<&Secret>,
    authority: &Authority,
    leaf: Leaf,
    now: Timestamp,
) -> Result<Option<(Secret, &'static str)>, TopologyError> {
    let names = Names::of(cluster)?;
    let (pair, why) = match leaf_action(existing, authority, &names, leaf, now) {
        LeafAction::Keep => return Ok(None),
        LeafAction::Issue(reason) => (authority.signing().leaf(&names, leaf, now)?, reason),
        LeafAction::Trust => {
            let kept = |key| existing.and_then(|s| value(s, key)).unwrap_or_default();
            ((kept(TLS_CRT), kept(TLS_KEY)), "CAs trusted changed")
        }
    };
    Ok(Some((leaf_secret(cluster, leaf, pair, authority.trust_bundle())?, why)))
}

/// The cert-manager `Certificate` that fills a component's Secret instead of the operator
/// (`spec.internalTls.certManager`): the same names, usages, lifetime and renewal margin as
/// the operator's own certificates, and a new key at every renewal.
pub fn certificate(
    cluster: &SextantCluster,
    leaf: Leaf,
    issuer: &crate::v1alpha1::IssuerRef,
) -> Result<kube::api::DynamicObject, TopologyError> {
    let names = Names::of(cluster)?;
    let hours = |d: SignedDuration| format!("{}h", d.as_secs() / 3600);
    let object = serde_json::json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": metadata(cluster, &names, leaf.secret(&names), leaf.component())?,
        "spec": {
            "secretName": leaf.secret(&names),
            "commonName": format!("{}.{}", leaf.secret(&names), names.namespace),
            "dnsNames": leaf.dns_names(&names),
            "uris": [leaf.role().uri()],
            "duration": hours(LEAF_VALIDITY),
            "renewBefore": hours(RENEW_BEFORE),
            "usages": ["digital signature", "server auth", "client auth"],
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
        },
    });
    serde_json::from_value(object).map_err(issue_error)
}

/// The mode pods end at: `require` with `spec.internalTls.enabled`, `off` without.
pub fn target_mode(enabled: bool) -> InternalTlsMode {
    if enabled {
        InternalTlsMode::Require
    } else {
        InternalTlsMode::Off
    }
}

/// The mode to render pods with: `rendered` (what they run now) while a rollout is not
/// `settled`, otherwise one step toward what `enabled` asks. Each step is a rolling restart, and
/// every pair of pods of two neighbouring steps can talk (docs/API.md, "Internal gRPC"). A
/// cluster without pods yet (`running` false), or one never recorded, starts at the target.
pub fn next_mode(enabled: bool, rendered: Option<InternalTlsMode>, running: bool, settled: bool) -> InternalTlsMode {
    use InternalTlsMode::*;
    const LADDER: [InternalTlsMode; 4] = [Off, Accept, Dial, Require];
    let target = target_mode(enabled);
    let Some(rendered) = rendered.filter(|_| running) else { return target };
    if rendered == target || !settled {
        return rendered;
    }
    let at = |m| LADDER.iter().position(|&l| l == m).expect("on the ladder");
    let (from, to) = (at(rendered), at(target));
    LADDER[if to > from { from + 1 } else { from - 1 }]
}

fn mode_flag(mode: InternalTlsMode) -> &'static str {
    match mode {
        InternalTlsMode::Off | InternalTlsMode::Require => "require",
        InternalTlsMode::Accept => "accept",
        InternalTlsMode::Dial => "dial",
    }
}

/// Mounts `secret` into the pod's container at [`INTERNAL_TLS_DIR`] and points the process at
/// it in `mode` (not `Off`). A user volume of the same name or path is refused.
pub fn mount(
    pod: &mut PodSpec,
    secret: String,
    component: &'static str,
    mode: InternalTlsMode,
) -> Result<(), TopologyError> {
    let refuse = |message: String| TopologyError::PodTemplate { component, message };
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    if volumes.iter().any(|v| v.name == VOLUME) {
        return Err(refuse(format!("volume name {VOLUME} is taken")));
    }
    let container = pod.containers.first_mut().ok_or(TopologyError::Missing("container"))?;
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    let under = |p: &str| p == INTERNAL_TLS_DIR || INTERNAL_TLS_DIR.starts_with(&format!("{p}/"));
    if let Some(m) = mounts.iter().find(|m| under(m.mount_path.trim_end_matches('/'))) {
        return Err(refuse(format!("volume {} cannot be mounted at {}", m.name, m.mount_path)));
    }
    volumes.push(Volume {
        name: VOLUME.into(),
        secret: Some(SecretVolumeSource { secret_name: Some(secret), ..SecretVolumeSource::default() }),
        ..Volume::default()
    });
    // Not a subPath: the kubelet then updates the files in place when the Secret changes.
    mounts.push(VolumeMount {
        name: VOLUME.into(),
        mount_path: INTERNAL_TLS_DIR.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    });
    let env = container.env.get_or_insert_with(Vec::new);
    env.push(EnvVar { name: DIR_ENV.into(), value: Some(INTERNAL_TLS_DIR.into()), ..EnvVar::default() });
    env.push(EnvVar { name: MODE_ENV.into(), value: Some(mode_flag(mode).into()), ..EnvVar::default() });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tests::cluster;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use std::sync::Arc;

    fn now() -> Timestamp {
        Timestamp::from_second(1_795_000_000).unwrap()
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    fn roots(ca: &Ca) -> Arc<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der(&ca.cert_pem)).unwrap();
        Arc::new(roots)
    }

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// As a router or node verifies a node it dialled at `host`.
    fn verify_server(ca: &Ca, cert: &str, host: &str, at: Timestamp) -> Result<(), rustls::Error> {
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots(ca), provider()).build().unwrap();
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(at.as_second() as u64));
        let name = ServerName::try_from(host.to_owned()).unwrap();
        verifier.verify_server_cert(&der(cert), &[], &name, &[], at).map(|_| ())
    }

    /// As a node verifies a peer that connected to it.
    fn verify_client(ca: &Ca, cert: &str, at: Timestamp) -> Result<(), rustls::Error> {
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots(ca), provider()).build().unwrap();
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(at.as_second() as u64));
        verifier.verify_client_cert(&der(cert), &[], at).map(|_| ())
    }

    #[test]
    fn issued_certificates_verify_as_nodes_and_routers_use_them() {
        let c = cluster(3, 3);
        let names = Names::of(&c).unwrap();
        let ca = Ca::issue(&names, now()).unwrap();
        let (node, _) = ca.leaf(&names, Leaf::Node, now()).unwrap();
        let (router, _) = ca.leaf(&names, Leaf::Router, now()).unwrap();
        for ordinal in [0, 4] {
            let host = names.node_address(ordinal);
            let host = host.split(':').next().unwrap();
            verify_server(&ca, &node, host, now()).unwrap_or_else(|e| panic!("{host}: {e}"));
        }
        verify_client(&ca, &node, now()).unwrap();
        verify_client(&ca, &router, now()).unwrap();
        // Each names its role, which is what nodes admit it to.
        for (cert, role) in [(&node, "spiffe://sextant/node"), (&router, "spiffe://sextant/router")] {
            let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
            let x509 = pem.parse_x509().unwrap();
            let san = x509.subject_alternative_name().unwrap().unwrap();
            let uris: Vec<String> = san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::URI(u) => Some(u.to_string()),
                    _ => None,
                })
                .collect();
            assert_eq!(uris, vec![role.to_owned()]);
        }
        // Not for other names, not after 90 days, not under another CA.
        assert!(verify_server(&ca, &node, "obs-node-0.obs-node.other.svc", now()).is_err());
        assert!(verify_server(&ca, &router, "obs-node-0.obs-node.telemetry.svc", now()).is_err());
        assert!(verify_client(&ca, &router, now() + SignedDuration::from_hours(24 * 91)).is_err());
        let other = Ca::issue(&names, now()).unwrap();
        assert!(verify_client(&other, &router, now()).is_err());
    }

    fn steady(ca: &Ca) -> Authority {
        Authority::Steady { ca: ca.clone() }
    }

    #[test]
    fn a_secret_is_renewed_when_missing_expiring_of_another_ca_or_misnamed() {
        let c = cluster(3, 3);
        let names = Names::of(&c).unwrap();
        let ca = Ca::issue(&names, now()).unwrap();
        let authority = steady(&ca);
        let pair = ca.leaf(&names, Leaf::Node, now()).unwrap();
        let secret = leaf_secret(&c, Leaf::Node, pair, authority.trust_bundle()).unwrap();
        let action = |s: Option<&Secret>, a: &Authority, leaf, at| leaf_action(s, a, &names, leaf, at);
        assert_eq!(action(None, &authority, Leaf::Node, now()), LeafAction::Issue("missing"));
        assert_eq!(action(Some(&secret), &authority, Leaf::Node, now()), LeafAction::Keep);
        let day = SignedDuration::from_hours(24);
        assert_eq!(action(Some(&secret), &authority, Leaf::Node, now() + day * 59), LeafAction::Keep);
        assert_eq!(action(Some(&secret), &authority, Leaf::Node, now() + day * 61), LeafAction::Issue("expiring"));
        let other = steady(&Ca::issue(&names, now()).unwrap());
        assert_eq!(action(Some(&secret), &other, Leaf::Node, now()), LeafAction::Issue("not of the cluster CA"));
        assert_eq!(action(Some(&secret), &authority, Leaf::Router, now()), LeafAction::Issue("names changed"));
        let mut broken = secret.clone();
        broken.string_data.as_mut().unwrap().remove(TLS_KEY);
        assert_eq!(action(Some(&broken), &authority, Leaf::Node, now()), LeafAction::Issue("incomplete"));
        // Signed by the CA that signs, but trusting other CAs than it should: only the trust.
        let introducing =
            Authority::Introducing { ca: ca.clone(), next: Ca::issue(&names, now()).unwrap(), since: now() };
        assert_eq!(action(Some(&secret), &introducing, Leaf::Node, now()), LeafAction::Trust);
        // As the API server returns it: base64 `data`, no `stringData`.
        let stored = Secret {
            data: Some(
                secret
                    .string_data
                    .clone()
                    .unwrap()
                    .into_iter()
                    .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
                    .collect(),
            ),
            string_data: None,
            ..secret.clone()
        };
        assert_eq!(action(Some(&stored), &authority, Leaf::Node, now()), LeafAction::Keep);
    }

    /// Every state of a rotation reads back from the Secret it is written to.
    #[test]
    fn the_ca_secret_holds_each_step_of_a_rotation() {
        let c = cluster(3, 3);
        let names = Names::of(&c).unwrap();
        let (old, new) = (Ca::issue(&names, now()).unwrap(), Ca::issue(&names, now()).unwrap());
        for authority in [
            steady(&old),
            Authority::Introducing { ca: old.clone(), next: new.clone(), since: now() },
            Authority::Retiring { ca: new.clone(), previous: old.cert_pem.clone(), since: now() },
        ] {
            let secret = ca_secret(&c, &authority, Some("r1")).unwrap();
            assert_eq!(Authority::from_secret(&secret), Ok(authority.clone()));
            assert_eq!(rotated_for(&secret), Some("r1"));
        }
        let mut broken = ca_secret(&c, &steady(&old), None).unwrap();
        broken.string_data.as_mut().unwrap().remove(CA_KEY);
        assert_eq!(Authority::from_secret(&broken), Err(CA_KEY));
    }

    /// The certificate in `secret` and the CAs it trusts.
    fn contents(secret: &Secret) -> (String, Vec<Ca>) {
        let trusted = value(secret, CA_CRT).unwrap();
        let cas = trusted
            .split_inclusive("-----END CERTIFICATE-----")
            .filter(|p| p.contains("BEGIN"))
            .map(|p| Ca { cert_pem: p.trim().to_owned(), key_pem: String::new() })
            .collect();
        (value(secret, TLS_CRT).unwrap(), cas)
    }

    fn trusts(cas: &[Ca], cert: &str, at: Timestamp) -> bool {
        cas.iter().any(|ca| verify_client(ca, cert, at).is_ok())
    }

    /// A CA near its end is replaced by reconciles every `every`, and at no moment can two pods
    /// fail to verify each other: any two versions of the component Secrets that pods may hold at
    /// once (one replaced less than [`TRUST_PROPAGATION`] before the other was written) trust
    /// each other's certificates. At the end one new CA signs and is trusted.
    #[test]
    fn a_ca_rotation_never_leaves_two_pods_without_a_ca_in_common() {
        let c = cluster(3, 3);
        let names = Names::of(&c).unwrap();
        // Issued 9.5 years ago: half a year left.
        let start = now();
        let issued = start - SignedDuration::from_hours(24 * 3468);
        let old = Ca::issue(&names, issued).unwrap();
        for every in [1, 5, 7, 16].map(SignedDuration::from_mins) {
            let mut authority = steady(&old);
            let leaves_issued = start - SignedDuration::from_hours(24 * 10);
            let mut secrets: Vec<Option<Secret>> = Leaf::ALL
                .iter()
                .map(|&leaf| {
                    let pair = old.leaf(&names, leaf, leaves_issued).unwrap();
                    Some(leaf_secret(&c, leaf, pair, authority.trust_bundle()).unwrap())
                })
                .collect();
            // Every version of every component Secret: (written at, replaced at, contents).
            let mut versions: Vec<(Timestamp, Option<Timestamp>, (String, Vec<Ca>))> =
                secrets.iter().map(|s| (leaves_issued, None, contents(s.as_ref().unwrap()))).collect();
            let mut open: Vec<usize> = vec![0, 1];
            let mut at = start;
            for _ in 0..(180 / every.as_mins()) {
                if let Some(step) = authority.step(&names, at, false).unwrap() {
                    authority = step.authority;
                }
                let mut changed = false;
                for (i, &leaf) in Leaf::ALL.iter().enumerate() {
                    let Some((fresh, _)) = renewed_leaf_secret(&c, secrets[i].as_ref(), &authority, leaf, at).unwrap()
                    else {
                        continue;
                    };
                    versions[open[i]].1 = Some(at);
                    versions.push((at, None, contents(&fresh)));
                    open[i] = versions.len() - 1;
                    secrets[i] = Some(fresh);
                    changed = true;
                }
                if changed {
                    authority = authority.restarted(at);
                }
                at += every;
            }
            for (written_a, replaced_a, (cert_a, cas_a)) in &versions {
                for (written_b, _, (cert_b, cas_b)) in &versions {
                    let coexist =
                        written_b >= written_a && replaced_a.is_none_or(|r| *written_b < r + TRUST_PROPAGATION);
                    if coexist {
                        assert!(trusts(cas_b, cert_a, *written_b), "every {every}: a newer pod refuses an older one");
                        assert!(trusts(cas_a, cert_b, *written_b), "every {every}: an older pod refuses a newer one");
                    }
                }
            }
            let Authority::Steady { ca } = &authority else { panic!("every {every}: still rotating: {authority:?}") };
            assert_ne!(ca, &old, "every {every}: the CA was not replaced");
            assert!(ca.expires().unwrap() > at + SignedDuration::from_hours(24 * 3000));
            for secret in secrets.iter().flatten() {
                let (cert, cas) = contents(secret);
                assert_eq!(cas.len(), 1, "every {every}: the old CA is still trusted");
                assert!(trusts(&cas, &cert, at));
            }
        }
    }

    /// What each mode serves and dials, as `sextant node --internal-tls-mode` does (and plain
    /// text only when off): (serves plain, serves TLS, dials TLS).
    fn wire(mode: InternalTlsMode) -> (bool, bool, bool) {
        match mode {
            InternalTlsMode::Off => (true, false, false),
            InternalTlsMode::Accept => (true, true, false),
            InternalTlsMode::Dial => (true, true, true),
            InternalTlsMode::Require => (false, true, true),
        }
    }

    fn talks(client: InternalTlsMode, server: InternalTlsMode) -> bool {
        let (plain, tls, _) = wire(server);
        if wire(client).2 {
            tls
        } else {
            plain
        }
    }

    proptest::proptest! {
        /// From any recorded mode, switching on or off: the mode holds while pods roll, moves one
        /// step per settled rollout, reaches the target in at most three, and pods of any two
        /// modes that can run at once (one step apart) talk both ways.
        #[test]
        fn internal_tls_switches_one_compatible_step_per_rollout(enabled: bool, start in 0usize..4, running: bool) {
            use InternalTlsMode::*;
            let start = [Off, Accept, Dial, Require][start];
            let target = if enabled { Require } else { Off };
            proptest::prop_assert_eq!(next_mode(enabled, Some(start), running, false), if running { start } else { target });
            let mut mode = next_mode(enabled, Some(start), running, true);
            let mut previous = if running { start } else { mode };
            for _ in 0..3 {
                proptest::prop_assert!(talks(mode, previous) && talks(previous, mode), "{:?} and {:?}", previous, mode);
                previous = mode;
                mode = next_mode(enabled, Some(mode), true, true);
            }
            proptest::prop_assert_eq!(mode, target);
            proptest::prop_assert_eq!(next_mode(enabled, None, true, true), target);
        }
    }

    /// A requested rotation starts whatever the CA's age; a young CA is otherwise left alone.
    #[test]
    fn a_young_ca_rotates_only_when_asked() {
        let c = cluster(3, 3);
        let names = Names::of(&c).unwrap();
        let authority = steady(&Ca::issue(&names, now()).unwrap());
        assert!(authority.step(&names, now(), false).unwrap().is_none());
        let step = authority.step(&names, now(), true).unwrap().expect("a rotation");
        assert!(matches!(step.authority, Authority::Introducing { .. }));
        assert!(step.why.contains("requested"), "{}", step.why);
        // Each step waits for the last.
        assert!(step.authority.step(&names, now() + SignedDuration::from_mins(9), false).unwrap().is_none());
    }

    #[test]
    fn a_cert_manager_certificate_fills_the_same_secret_with_the_same_names() {
        let c = cluster(3, 3);
        let names = Names::of(&c).unwrap();
        let issuer = crate::v1alpha1::IssuerRef {
            name: "internal-ca".into(),
            kind: "ClusterIssuer".into(),
            group: "cert-manager.io".into(),
        };
        let cert = serde_json::to_value(certificate(&c, Leaf::Node, &issuer).unwrap()).unwrap();
        assert_eq!(cert["apiVersion"], "cert-manager.io/v1");
        assert_eq!(cert["kind"], "Certificate");
        assert_eq!(cert["metadata"]["name"], "obs-node-tls");
        assert_eq!(cert["metadata"]["ownerReferences"][0]["kind"], "SextantCluster");
        assert_eq!(cert["spec"]["secretName"], "obs-node-tls");
        assert_eq!(cert["spec"]["dnsNames"], serde_json::json!(Leaf::Node.dns_names(&names)));
        assert_eq!(cert["spec"]["uris"], serde_json::json!(["spiffe://sextant/node"]));
        assert!(cert["spec"]["dnsNames"].as_array().unwrap().contains(&"*.obs-node.telemetry.svc".into()));
        assert_eq!(cert["spec"]["duration"], "2160h");
        assert_eq!(cert["spec"]["renewBefore"], "720h");
        assert_eq!(cert["spec"]["usages"], serde_json::json!(["digital signature", "server auth", "client auth"]));
        assert_eq!(
            cert["spec"]["issuerRef"],
            serde_json::json!({"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
        );
    }

    #[test]
    fn secrets_are_owned_by_the_cluster_and_typed() {
        let c = cluster(3, 3);
        let names = Names::of(&c).unwrap();
        let ca = Ca::issue(&names, now()).unwrap();
        let ca_s = ca_secret(&c, &steady(&ca), None).unwrap();
        assert_eq!(ca_s.metadata.name.as_deref(), Some("obs-internal-ca"));
        assert_eq!(ca_s.metadata.owner_references.as_ref().unwrap()[0].kind, "SextantCluster");
        let node =
            leaf_secret(&c, Leaf::Node, ca.leaf(&names, Leaf::Node, now()).unwrap(), ca.cert_pem.clone()).unwrap();
        assert_eq!(node.metadata.name.as_deref(), Some("obs-node-tls"));
        assert_eq!(node.type_.as_deref(), Some("kubernetes.io/tls"));
        let keys: Vec<&String> = node.string_data.as_ref().unwrap().keys().collect();
        assert_eq!(keys, ["ca.crt", "tls.crt", "tls.key"]);
        assert!(!node.string_data.as_ref().unwrap().values().any(|v| v.contains(&ca.key_pem)));
    }
}

#[cfg(test)]
mod pod_tests {
    use crate::topology::tests::cluster;
    use crate::topology::{owned_objects, Owned};
    use k8s_openapi::api::core::v1::PodSpec;

    fn pods(c: &crate::v1alpha1::SextantCluster) -> (PodSpec, PodSpec) {
        let objects = owned_objects(c, 3, 3, "sextant-system").unwrap();
        let node = objects.iter().find_map(|o| match o {
            Owned::StatefulSet(s) => s.spec.as_ref()?.template.spec.clone(),
            _ => None,
        });
        let router = objects.iter().find_map(|o| match o {
            Owned::Deployment(d) => d.spec.as_ref()?.template.spec.clone(),
            _ => None,
        });
        (node.unwrap(), router.unwrap())
    }

    /// The Secret mounted at the internal TLS directory and the env pointing there, if any.
    fn mounted(pod: &PodSpec) -> Option<(String, String)> {
        let container = &pod.containers[0];
        let mount = container.volume_mounts.iter().flatten().find(|m| m.mount_path == super::INTERNAL_TLS_DIR)?;
        assert_eq!(mount.read_only, Some(true));
        assert!(mount.sub_path.is_none(), "a subPath mount is never updated by the kubelet");
        let volume = pod.volumes.iter().flatten().find(|v| v.name == mount.name)?;
        let env = container.env.iter().flatten().find(|e| e.name == "SEXTANT_INTERNAL_TLS_DIR")?;
        Some((volume.secret.as_ref()?.secret_name.clone()?, env.value.clone()?))
    }

    #[test]
    fn pods_mount_their_component_certificate_only_when_enabled() {
        let mut c = cluster(3, 3);
        let (node, router) = pods(&c);
        assert_eq!(mounted(&node), None);
        assert_eq!(mounted(&router), None);
        c.spec.internal_tls.enabled = true;
        let (node, router) = pods(&c);
        let dir = super::INTERNAL_TLS_DIR.to_owned();
        assert_eq!(mounted(&node), Some(("obs-node-tls".into(), dir.clone())));
        assert_eq!(mounted(&router), Some(("obs-router-tls".into(), dir)));
        // The CA's key is mounted nowhere.
        for pod in [&node, &router] {
            assert!(!pod
                .volumes
                .iter()
                .flatten()
                .any(|v| v.secret.as_ref().is_some_and(|s| s.secret_name.as_deref() == Some("obs-internal-ca"))));
        }
    }

    #[test]
    fn a_user_volume_in_the_way_of_the_certificates_is_refused() {
        for volume in [
            serde_json::json!({"name": "internal-tls", "mountPath": "/etc/other", "secret": {"secretName": "x"}}),
            serde_json::json!({"name": "certs", "mountPath": "/etc/sextant", "secret": {"secretName": "x"}}),
        ] {
            let mut c = cluster(3, 3);
            c.spec.internal_tls.enabled = true;
            c.spec.routers.pod.volumes = vec![serde_json::from_value(volume.clone()).unwrap()];
            let e = owned_objects(&c, 3, 3, "sextant-system").unwrap_err();
            assert!(e.to_string().contains("routers.pod"), "{volume}: {e}");
        }
    }
}
