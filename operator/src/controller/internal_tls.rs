//! `spec.internalTls`: the cluster CA and the node and router certificates in their Secrets
//! (`crate::internal_tls`), created before the pods that mount them, issued again when they
//! near expiry, and the CA rotated step by step ([`Authority::step`]) a year before it expires
//! or when the cluster's `sextant.dev/rotate-internal-ca` annotation changes.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::ResourceExt;

use super::{Context, Error};
use crate::internal_tls::{ca_secret, renewed_leaf_secret, rotated_for, Authority, Ca, Leaf, ROTATE_ANNOTATION};
use crate::topology::Names;
use crate::v1alpha1::SextantCluster;

fn concurrently(name: &str) -> Error {
    Error::Waiting(format!("{name} was created concurrently"))
}

/// Creates `secret`, or replaces it if unchanged since it was read at `version` (409
/// otherwise: the next reconcile looks again). Returns the new version.
async fn write(secrets: &Api<Secret>, mut secret: Secret, version: Option<String>) -> Result<Option<String>, Error> {
    let name = secret.name_any();
    let written = match version {
        None => secrets.create(&PostParams::default(), &secret).await.map_err(|e| match e {
            kube::Error::Api(s) if s.is_already_exists() => concurrently(&name),
            e => e.into(),
        })?,
        Some(version) => {
            secret.metadata.resource_version = Some(version);
            secrets.replace(&name, &PostParams::default(), &secret).await?
        }
    };
    Ok(written.metadata.resource_version)
}

pub async fn ensure(ctx: &Context, cluster: &SextantCluster, names: &Names) -> Result<(), Error> {
    if let Some(cm) = &cluster.spec.internal_tls.cert_manager {
        return certificates(ctx, cluster, names, &cm.issuer_ref).await;
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let now = (ctx.clock)();
    let ca_name = names.internal_ca();
    let requested = cluster.annotations().get(ROTATE_ANNOTATION).cloned();
    let (mut authority, mut handled, mut version) = match secrets.get_opt(&ca_name).await? {
        Some(s) => {
            let authority = Authority::from_secret(&s).map_err(|key| Error::BadSecret(ca_name.clone(), key))?;
            (authority, rotated_for(&s).map(str::to_owned), s.metadata.resource_version)
        }
        None => {
            // A new CA answers a rotation request already on the cluster.
            let authority = Authority::Steady { ca: Ca::issue(names, now)? };
            let version = write(&secrets, ca_secret(cluster, &authority, requested.as_deref())?, None).await?;
            ctx.event(cluster, false, "InternalCaCreated", format!("generated {ca_name}")).await;
            (authority, requested.clone(), version)
        }
    };
    let request_pending = requested.is_some() && requested != handled;
    if let Some(step) = authority.step(names, now, request_pending)? {
        if matches!(authority, Authority::Steady { .. }) {
            handled = requested.clone();
        }
        version = write(&secrets, ca_secret(cluster, &step.authority, handled.as_deref())?, version).await?;
        ctx.event(cluster, false, "InternalCaRotation", step.why).await;
        authority = step.authority;
    }

    let mut changed = Vec::new();
    for leaf in Leaf::ALL {
        let name = leaf.secret(names);
        let existing = secrets.get_opt(&name).await?;
        let Some((fresh, why)) = renewed_leaf_secret(cluster, existing.as_ref(), &authority, leaf, now)? else {
            continue;
        };
        write(&secrets, fresh, existing.and_then(|s| s.metadata.resource_version)).await?;
        changed.push(format!("{name} ({why})"));
    }
    if !changed.is_empty() {
        ctx.event(cluster, false, "InternalCertificatesIssued", format!("updated {}", changed.join(", "))).await;
        if !matches!(authority, Authority::Steady { .. }) {
            // The step's wait counts from the last change pods must see.
            let restarted = authority.restarted(now);
            write(&secrets, ca_secret(cluster, &restarted, handled.as_deref())?, version).await?;
        }
    }
    Ok(())
}

/// `spec.internalTls.certManager`: applies a cert-manager Certificate per component, which
/// cert-manager fills into the Secret the pods mount and renews. No CA Secret of ours.
async fn certificates(
    ctx: &Context,
    cluster: &SextantCluster,
    names: &Names,
    issuer: &crate::v1alpha1::IssuerRef,
) -> Result<(), Error> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"));
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &names.namespace, &resource);
    for leaf in Leaf::ALL {
        let certificate = crate::internal_tls::certificate(cluster, leaf, issuer)?;
        let params = PatchParams::apply(super::FIELD_MANAGER).force();
        match api.patch(&leaf.secret(names), &params, &Patch::Apply(&certificate)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(Error::Waiting(
                    "spec.internalTls.certManager is set but cert-manager's Certificate resource is not installed"
                        .into(),
                ))
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::mock::*;
    use crate::internal_tls::{ca_secret, leaf_secret, Authority, Ca, Leaf};
    use crate::topology::tests::cluster;
    use crate::topology::Names;
    use http::Method;
    use k8s_openapi::jiff::SignedDuration;
    use serde_json::Value;

    const SECRETS: &str = "/api/v1/namespaces/telemetry/secrets";
    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/telemetry/events";

    fn enabled() -> crate::v1alpha1::SextantCluster {
        let mut c = cluster(3, 3);
        c.spec.internal_tls.enabled = true;
        c
    }

    fn certificate_of(body: &Value) -> String {
        body["stringData"]["tls.crt"].as_str().expect("tls.crt").to_owned()
    }

    #[tokio::test]
    async fn enabling_creates_the_ca_then_a_certificate_for_nodes_and_one_for_routers() {
        let c = enabled();
        let names = Names::of(&c).unwrap();
        let steps = vec![
            Step::get(&format!("{SECRETS}/obs-internal-ca")).not_found(),
            Step::new(Method::POST, SECRETS).expect_body(|b| {
                assert_eq!(b["metadata"]["name"], "obs-internal-ca");
                assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "SextantCluster");
                assert!(b["stringData"]["ca.key"].as_str().unwrap().contains("PRIVATE KEY"));
            }),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "InternalCaCreated")),
            Step::get(&format!("{SECRETS}/obs-node-tls")).not_found(),
            Step::new(Method::POST, SECRETS).expect_body(|b| {
                assert_eq!(b["metadata"]["name"], "obs-node-tls");
                assert_eq!(b["type"], "kubernetes.io/tls");
                assert!(b["stringData"]["ca.key"].is_null(), "the CA key is not given to pods");
                assert!(certificate_of(b).starts_with("-----BEGIN CERTIFICATE-----"));
            }),
            Step::get(&format!("{SECRETS}/obs-router-tls")).not_found(),
            Step::new(Method::POST, SECRETS).expect_body(|b| assert_eq!(b["metadata"]["name"], "obs-router-tls")),
            Step::new(Method::POST, EVENTS).expect_body(|b| {
                assert_eq!(b["reason"], "InternalCertificatesIssued");
                assert_eq!(b["note"], "updated obs-node-tls (missing), obs-router-tls (missing)");
            }),
        ];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap();
    }

    #[tokio::test]
    async fn current_certificates_stay_and_one_near_expiry_is_replaced_in_place() {
        let c = enabled();
        let names = Names::of(&c).unwrap();
        let ca = Ca::issue(&names, fixed_now()).unwrap();
        let trust = || ca.cert_pem.clone();
        let current = leaf_secret(&c, Leaf::Node, ca.leaf(&names, Leaf::Node, fixed_now()).unwrap(), trust()).unwrap();
        let old = fixed_now() - SignedDuration::from_hours(24 * 70);
        let mut expiring = leaf_secret(&c, Leaf::Router, ca.leaf(&names, Leaf::Router, old).unwrap(), trust()).unwrap();
        expiring.metadata.resource_version = Some("41".into());
        let old_cert = expiring.string_data.as_ref().unwrap()["tls.crt"].clone();
        let ca_pem = ca.cert_pem.clone();
        let steps = vec![
            Step::get(&format!("{SECRETS}/obs-internal-ca")).reply(
                200,
                serde_json::to_value(ca_secret(&c, &Authority::Steady { ca: ca.clone() }, None).unwrap()).unwrap(),
            ),
            Step::get(&format!("{SECRETS}/obs-node-tls")).reply(200, serde_json::to_value(&current).unwrap()),
            Step::get(&format!("{SECRETS}/obs-router-tls")).reply(200, serde_json::to_value(&expiring).unwrap()),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-router-tls")).expect_body(move |b| {
                assert_eq!(b["metadata"]["resourceVersion"], "41");
                assert_ne!(certificate_of(b), old_cert);
                assert_eq!(b["stringData"]["ca.crt"], ca_pem.as_str());
            }),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["note"], "updated obs-router-tls (expiring)")),
        ];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap();
    }

    fn bundle_len(b: &Value) -> usize {
        b["stringData"]["ca.crt"].as_str().expect("ca.crt").matches("BEGIN CERTIFICATE").count()
    }

    /// A CA with half a year left: a new CA is made and trusted beside it in both component
    /// Secrets, whose certificates stay as they are, and the step's wait starts then.
    #[tokio::test]
    async fn a_ca_near_its_end_is_first_trusted_beside_a_new_one() {
        let c = enabled();
        let names = Names::of(&c).unwrap();
        let ca = Ca::issue(&names, fixed_now() - SignedDuration::from_hours(24 * 3468)).unwrap();
        let mut ca_s = ca_secret(&c, &Authority::Steady { ca: ca.clone() }, None).unwrap();
        ca_s.metadata.resource_version = Some("7".into());
        let leaf = |l: Leaf| {
            let old = fixed_now() - SignedDuration::from_hours(24 * 10);
            let mut s = leaf_secret(&c, l, ca.leaf(&names, l, old).unwrap(), ca.cert_pem.clone()).unwrap();
            s.metadata.resource_version = Some("9".into());
            s
        };
        let (node, router) = (leaf(Leaf::Node), leaf(Leaf::Router));
        let node_cert = certificate_of(&serde_json::to_value(&node).unwrap());
        let since = fixed_now().to_string();
        let steps = vec![
            Step::get(&format!("{SECRETS}/obs-internal-ca")).reply(200, serde_json::to_value(&ca_s).unwrap()),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-internal-ca")).expect_body(|b| {
                assert_eq!(b["metadata"]["resourceVersion"], "7");
                assert!(b["stringData"]["next.crt"].as_str().unwrap().contains("BEGIN CERTIFICATE"));
                assert!(b["stringData"]["next.key"].as_str().unwrap().contains("PRIVATE KEY"));
            }),
            Step::new(Method::POST, EVENTS).expect_body(|b| {
                assert_eq!(b["reason"], "InternalCaRotation");
                assert!(b["note"].as_str().unwrap().contains("a new CA is trusted beside it"), "{b}");
            }),
            Step::get(&format!("{SECRETS}/obs-node-tls")).reply(200, serde_json::to_value(&node).unwrap()),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-node-tls")).expect_body(move |b| {
                assert_eq!(certificate_of(b), node_cert, "the certificate is kept");
                assert_eq!(bundle_len(b), 2);
            }),
            Step::get(&format!("{SECRETS}/obs-router-tls")).reply(200, serde_json::to_value(&router).unwrap()),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-router-tls")).expect_body(|b| assert_eq!(bundle_len(b), 2)),
            Step::new(Method::POST, EVENTS).expect_body(|b| {
                assert_eq!(
                    b["note"],
                    "updated obs-node-tls (CAs trusted changed), obs-router-tls (CAs trusted changed)"
                );
            }),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-internal-ca")).expect_body(move |b| {
                assert_eq!(b["metadata"]["annotations"]["sextant.dev/ca-step-since"], since.as_str());
            }),
        ];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap();
    }

    /// A new value of the cluster's `sextant.dev/rotate-internal-ca` starts a rotation of a
    /// young CA, once: the CA Secret records the value it acted on.
    #[tokio::test]
    async fn a_rotation_is_started_by_a_new_annotation_value_once() {
        let mut c = enabled();
        c.metadata.annotations = Some([("sextant.dev/rotate-internal-ca".to_owned(), "2026-11-27".to_owned())].into());
        let names = Names::of(&c).unwrap();
        let ca = Ca::issue(&names, fixed_now()).unwrap();
        let leaf = |l: Leaf| {
            let mut s = leaf_secret(&c, l, ca.leaf(&names, l, fixed_now()).unwrap(), ca.cert_pem.clone()).unwrap();
            s.metadata.resource_version = Some("5".into());
            s
        };
        let (node, router) = (leaf(Leaf::Node), leaf(Leaf::Router));
        // Already acted on: nothing to do.
        let handled = ca_secret(&c, &Authority::Steady { ca: ca.clone() }, Some("2026-11-27")).unwrap();
        let steps = vec![
            Step::get(&format!("{SECRETS}/obs-internal-ca")).reply(200, serde_json::to_value(&handled).unwrap()),
            Step::get(&format!("{SECRETS}/obs-node-tls")).reply(200, serde_json::to_value(&node).unwrap()),
            Step::get(&format!("{SECRETS}/obs-router-tls")).reply(200, serde_json::to_value(&router).unwrap()),
        ];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap();
        // A value not acted on yet: the rotation starts and records it.
        let mut before = ca_secret(&c, &Authority::Steady { ca: ca.clone() }, Some("2026-01-01")).unwrap();
        before.metadata.resource_version = Some("3".into());
        let steps = vec![
            Step::get(&format!("{SECRETS}/obs-internal-ca")).reply(200, serde_json::to_value(&before).unwrap()),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-internal-ca")).expect_body(|b| {
                assert_eq!(b["metadata"]["annotations"]["sextant.dev/ca-rotated-for"], "2026-11-27");
                assert!(b["stringData"]["next.crt"].is_string());
            }),
            Step::new(Method::POST, EVENTS)
                .expect_body(|b| assert!(b["note"].as_str().unwrap().starts_with("a rotation was requested"), "{b}")),
            Step::get(&format!("{SECRETS}/obs-node-tls")).reply(200, serde_json::to_value(&node).unwrap()),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-node-tls")),
            Step::get(&format!("{SECRETS}/obs-router-tls")).reply(200, serde_json::to_value(&router).unwrap()),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-router-tls")),
            Step::new(Method::POST, EVENTS),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-internal-ca")),
        ];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap();
    }

    #[tokio::test]
    async fn with_cert_manager_the_operator_applies_certificates_and_issues_nothing_itself() {
        let mut c = enabled();
        c.spec.internal_tls.cert_manager =
            Some(serde_json::from_value(serde_json::json!({"issuerRef": {"name": "ca"}})).unwrap());
        let names = Names::of(&c).unwrap();
        let path = |name: &str| format!("/apis/cert-manager.io/v1/namespaces/telemetry/certificates/{name}");
        let steps = vec![
            Step::apply(&path("obs-node-tls")).expect_body(|b| {
                assert_eq!(b["spec"]["secretName"], "obs-node-tls");
                assert_eq!(
                    b["spec"]["issuerRef"],
                    serde_json::json!({"name": "ca", "kind": "Issuer", "group": "cert-manager.io"})
                );
            }),
            Step::apply(&path("obs-router-tls")).expect_body(|b| assert_eq!(b["spec"]["secretName"], "obs-router-tls")),
        ];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap();
    }

    #[tokio::test]
    async fn without_cert_manager_installed_the_reconcile_waits_and_says_why() {
        let mut c = enabled();
        c.spec.internal_tls.cert_manager =
            Some(serde_json::from_value(serde_json::json!({"issuerRef": {"name": "ca"}})).unwrap());
        let names = Names::of(&c).unwrap();
        let steps =
            vec![Step::apply("/apis/cert-manager.io/v1/namespaces/telemetry/certificates/obs-node-tls").not_found()];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let e = mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap_err();
        assert!(matches!(&e, super::Error::Waiting(m) if m.contains("cert-manager")), "{e}");
    }

    #[tokio::test]
    async fn a_ca_secret_without_its_key_stops_the_reconcile() {
        let c = enabled();
        let names = Names::of(&c).unwrap();
        let mut broken =
            ca_secret(&c, &Authority::Steady { ca: Ca::issue(&names, fixed_now()).unwrap() }, None).unwrap();
        broken.string_data.as_mut().unwrap().remove("ca.key");
        let steps =
            vec![Step::get(&format!("{SECRETS}/obs-internal-ca")).reply(200, serde_json::to_value(&broken).unwrap())];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let e = mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap_err();
        assert!(matches!(e, super::Error::BadSecret(ref s, "ca.key") if s == "obs-internal-ca"), "{e}");
    }
}
