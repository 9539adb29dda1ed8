//! `spec.internalTls`: the cluster CA and the node and router certificates in their Secrets
//! (`crate::internal_tls`), created before the pods that mount them and issued again when
//! they near expiry. The CA Secret is created once and never rewritten.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};

use super::{Context, Error};
use crate::internal_tls::{ca_secret, leaf_secret, renewal_reason, Ca, Leaf, CA_KEY};
use crate::topology::Names;
use crate::v1alpha1::SextantCluster;

pub async fn ensure(ctx: &Context, cluster: &SextantCluster, names: &Names) -> Result<(), Error> {
    if let Some(cm) = &cluster.spec.internal_tls.cert_manager {
        return certificates(ctx, cluster, names, &cm.issuer_ref).await;
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let now = (ctx.clock)();
    let ca = match secrets.get_opt(&names.internal_ca()).await? {
        Some(s) => Ca::from_secret(&s).ok_or_else(|| Error::BadSecret(names.internal_ca(), CA_KEY))?,
        None => {
            let ca = Ca::issue(names, now)?;
            match secrets.create(&PostParams::default(), &ca_secret(cluster, &ca)?).await {
                Ok(_) => {
                    ctx.event(cluster, false, "InternalCaCreated", format!("generated {}", names.internal_ca())).await
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    return Err(Error::Waiting(format!("{} was created concurrently", names.internal_ca())))
                }
                Err(e) => return Err(e.into()),
            }
            ca
        }
    };
    let mut issued = Vec::new();
    for leaf in Leaf::ALL {
        let name = leaf.secret(names);
        let existing = secrets.get_opt(&name).await?;
        let Some(reason) = renewal_reason(existing.as_ref(), &ca, names, leaf, now) else { continue };
        let mut fresh = leaf_secret(cluster, leaf, ca.leaf(names, leaf, now)?, &ca)?;
        match existing {
            None => match secrets.create(&PostParams::default(), &fresh).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    return Err(Error::Waiting(format!("{name} was created concurrently")))
                }
                Err(e) => return Err(e.into()),
            },
            Some(old) => {
                // Replaced whole, only if unchanged since read (409 otherwise: the next
                // reconcile looks again).
                fresh.metadata.resource_version = old.metadata.resource_version;
                secrets.replace(&name, &PostParams::default(), &fresh).await?;
            }
        }
        issued.push(format!("{name} ({reason})"));
    }
    if !issued.is_empty() {
        ctx.event(cluster, false, "InternalCertificatesIssued", format!("issued {}", issued.join(", "))).await;
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
    use crate::internal_tls::{ca_secret, leaf_secret, Ca, Leaf};
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
                assert_eq!(b["note"], "issued obs-node-tls (missing), obs-router-tls (missing)");
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
        let current = leaf_secret(&c, Leaf::Node, ca.leaf(&names, Leaf::Node, fixed_now()).unwrap(), &ca).unwrap();
        let old = fixed_now() - SignedDuration::from_hours(24 * 70);
        let mut expiring = leaf_secret(&c, Leaf::Router, ca.leaf(&names, Leaf::Router, old).unwrap(), &ca).unwrap();
        expiring.metadata.resource_version = Some("41".into());
        let old_cert = expiring.string_data.as_ref().unwrap()["tls.crt"].clone();
        let ca_pem = ca.cert_pem.clone();
        let steps = vec![
            Step::get(&format!("{SECRETS}/obs-internal-ca"))
                .reply(200, serde_json::to_value(ca_secret(&c, &ca).unwrap()).unwrap()),
            Step::get(&format!("{SECRETS}/obs-node-tls")).reply(200, serde_json::to_value(&current).unwrap()),
            Step::get(&format!("{SECRETS}/obs-router-tls")).reply(200, serde_json::to_value(&expiring).unwrap()),
            Step::new(Method::PUT, &format!("{SECRETS}/obs-router-tls")).expect_body(move |b| {
                assert_eq!(b["metadata"]["resourceVersion"], "41");
                assert_ne!(certificate_of(b), old_cert);
                assert_eq!(b["stringData"]["ca.crt"], ca_pem.as_str());
            }),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["note"], "issued obs-router-tls (expiring)")),
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
        let mut broken = ca_secret(&c, &Ca::issue(&names, fixed_now()).unwrap()).unwrap();
        broken.string_data.as_mut().unwrap().remove("ca.key");
        let steps =
            vec![Step::get(&format!("{SECRETS}/obs-internal-ca")).reply(200, serde_json::to_value(&broken).unwrap())];
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let e = mock.run(steps, serde_json::to_value(&c).unwrap(), super::ensure(&ctx, &c, &names)).await.unwrap_err();
        assert!(matches!(e, super::Error::BadSecret(ref s, "ca.key") if s == "obs-internal-ca"), "{e}");
    }
}
