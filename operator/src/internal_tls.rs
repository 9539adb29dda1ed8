//! Certificates of mutual TLS on internal gRPC (`spec.internalTls`, docs/KUBERNETES.md, "TLS"):
//! a cluster CA the operator creates once (Secret `NAME-internal-ca`, mounted nowhere) and one
//! certificate for all nodes and one for all routers (Secrets `NAME-node-tls`, `NAME-router-tls`
//! with `tls.crt`, `tls.key` and `ca.crt`), issued again well before they expire. Both serve
//! as server and client certificates. The node certificate names every node through the
//! headless Service (`*.NAME-node.NAMESPACE.svc`), which is how nodes and routers dial them.

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
use crate::v1alpha1::SextantCluster;

/// Where the component's Secret is mounted; `sextant node` and `sextant router` find it through
/// `SEXTANT_INTERNAL_TLS_DIR`.
pub const INTERNAL_TLS_DIR: &str = "/etc/sextant/internal-tls";
const VOLUME: &str = "internal-tls";
const DIR_ENV: &str = "SEXTANT_INTERNAL_TLS_DIR";

/// Keys of the Secrets.
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";

/// The CA is not renewed by the operator (docs/KUBERNETES.md, "TLS").
const CA_VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 3650);
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

    pub fn from_secret(secret: &Secret) -> Option<Ca> {
        Some(Ca { cert_pem: value(secret, CA_CRT)?, key_pem: value(secret, CA_KEY)? })
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

/// `NAME-internal-ca`: the CA certificate and its key.
pub fn ca_secret(cluster: &SextantCluster, ca: &Ca) -> Result<Secret, TopologyError> {
    let names = Names::of(cluster)?;
    Ok(Secret {
        metadata: metadata(cluster, &names, names.internal_ca(), "internal-ca")?,
        type_: Some("Opaque".into()),
        string_data: Some([(CA_CRT.to_owned(), ca.cert_pem.clone()), (CA_KEY.to_owned(), ca.key_pem.clone())].into()),
        ..Secret::default()
    })
}

/// A component's Secret: its certificate and key, and the CA certificate to verify peers with.
pub fn leaf_secret(
    cluster: &SextantCluster,
    leaf: Leaf,
    (cert, key): (String, String),
    ca: &Ca,
) -> Result<Secret, TopologyError> {
    let names = Names::of(cluster)?;
    Ok(Secret {
        metadata: metadata(cluster, &names, leaf.secret(&names), leaf.component())?,
        type_: Some("kubernetes.io/tls".into()),
        string_data: Some(
            [(TLS_CRT.to_owned(), cert), (TLS_KEY.to_owned(), key), (CA_CRT.to_owned(), ca.cert_pem.clone())].into(),
        ),
        ..Secret::default()
    })
}

/// Why a component's Secret must be issued (again); `None` when it is current.
pub fn renewal_reason(
    existing: Option<&Secret>,
    ca: &Ca,
    names: &Names,
    leaf: Leaf,
    now: Timestamp,
) -> Option<&'static str> {
    let Some(secret) = existing else { return Some("missing") };
    let (Some(cert), Some(_key), Some(ca_cert)) =
        (value(secret, TLS_CRT), value(secret, TLS_KEY), value(secret, CA_CRT))
    else {
        return Some("incomplete");
    };
    if ca_cert.trim() != ca.cert_pem.trim() {
        return Some("not of the cluster CA");
    }
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(cert.as_bytes()) else { return Some("unreadable") };
    let Ok(x509) = pem.parse_x509() else { return Some("unreadable") };
    let expires = x509.validity().not_after.timestamp();
    if expires.saturating_sub(now.as_second()) < RENEW_BEFORE.as_secs() {
        return Some("expiring");
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
    (named != want).then_some("names changed")
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

/// Mounts `secret` into the pod's container at [`INTERNAL_TLS_DIR`] and points the process at
/// it. A user volume of the same name or path is refused.
pub fn mount(pod: &mut PodSpec, secret: String, component: &'static str) -> Result<(), TopologyError> {
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
    container.env.get_or_insert_with(Vec::new).push(EnvVar {
        name: DIR_ENV.into(),
        value: Some(INTERNAL_TLS_DIR.into()),
        ..EnvVar::default()
    });
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

    #[test]
    fn a_secret_is_renewed_when_missing_expiring_of_another_ca_or_misnamed() {
        let c = cluster(3, 3);
        let names = Names::of(&c).unwrap();
        let ca = Ca::issue(&names, now()).unwrap();
        let secret = leaf_secret(&c, Leaf::Node, ca.leaf(&names, Leaf::Node, now()).unwrap(), &ca).unwrap();
        assert_eq!(renewal_reason(None, &ca, &names, Leaf::Node, now()), Some("missing"));
        assert_eq!(renewal_reason(Some(&secret), &ca, &names, Leaf::Node, now()), None);
        let day = SignedDuration::from_hours(24);
        assert_eq!(renewal_reason(Some(&secret), &ca, &names, Leaf::Node, now() + day * 59), None);
        assert_eq!(renewal_reason(Some(&secret), &ca, &names, Leaf::Node, now() + day * 61), Some("expiring"));
        let other = Ca::issue(&names, now()).unwrap();
        assert_eq!(renewal_reason(Some(&secret), &other, &names, Leaf::Node, now()), Some("not of the cluster CA"));
        assert_eq!(renewal_reason(Some(&secret), &ca, &names, Leaf::Router, now()), Some("names changed"));
        let mut broken = secret.clone();
        broken.string_data.as_mut().unwrap().remove(TLS_KEY);
        assert_eq!(renewal_reason(Some(&broken), &ca, &names, Leaf::Node, now()), Some("incomplete"));
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
        assert_eq!(renewal_reason(Some(&stored), &ca, &names, Leaf::Node, now()), None);
        assert_eq!(Ca::from_secret(&ca_secret(&c, &ca).unwrap()), Some(ca));
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
        let ca_s = ca_secret(&c, &ca).unwrap();
        assert_eq!(ca_s.metadata.name.as_deref(), Some("obs-internal-ca"));
        assert_eq!(ca_s.metadata.owner_references.as_ref().unwrap()[0].kind, "SextantCluster");
        let node = leaf_secret(&c, Leaf::Node, ca.leaf(&names, Leaf::Node, now()).unwrap(), &ca).unwrap();
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
