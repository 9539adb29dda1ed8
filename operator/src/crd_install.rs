//! The operator keeps its CustomResourceDefinitions current (`--manage-crds`): Helm installs
//! `crds/` once and never upgrades it, so at startup each CRD is applied (server-side, field
//! manager `sextant-operator`) when it is missing, older than this operator, or of this version
//! with other content. A CRD written by a newer operator is left alone, so an old replica still
//! running during a rollout cannot take fields away.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::controller::FIELD_MANAGER;
use crate::manifests::{custom_resource_definitions, CRD_HASH_ANNOTATION, OPERATOR_VERSION_ANNOTATION};

/// What to do with one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Create,
    /// Apply over what is there (`from`: the version recorded on it, if any).
    Upgrade {
        from: Option<String>,
    },
    /// Leave it: why.
    Keep(&'static str),
}

/// Compares the live CRD's recorded operator version and content hash with ours.
pub fn decide(live: Option<&CustomResourceDefinition>, ours: &CustomResourceDefinition) -> Decision {
    let Some(live) = live else { return Decision::Create };
    let annotation = |crd: &CustomResourceDefinition, key: &str| crd.annotations().get(key).cloned();
    let ours_version = annotation(ours, OPERATOR_VERSION_ANNOTATION).and_then(|v| Version::parse(&v));
    let live_raw = annotation(live, OPERATOR_VERSION_ANNOTATION);
    let live_version = live_raw.as_deref().and_then(Version::parse);
    match (live_version, ours_version) {
        (Some(l), Some(o)) if l > o => Decision::Keep("written by a newer operator"),
        (Some(l), Some(o)) if l == o => {
            if annotation(live, CRD_HASH_ANNOTATION) == annotation(ours, CRD_HASH_ANNOTATION) {
                Decision::Keep("up to date")
            } else {
                Decision::Upgrade { from: live_raw }
            }
        }
        _ => Decision::Upgrade { from: live_raw },
    }
}

/// `major.minor.patch[-pre]`; a pre-release sorts before its release.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Version {
    numbers: (u64, u64, u64),
    release: bool,
    pre: String,
}

impl Version {
    fn parse(s: &str) -> Option<Self> {
        let (core, pre) = s.split_once('-').unwrap_or((s, ""));
        let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
        let numbers = (parts.next()??, parts.next()??, parts.next()??);
        if parts.next().is_some() {
            return None;
        }
        Some(Self { numbers, release: pre.is_empty(), pre: pre.to_owned() })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("CustomResourceDefinition {name}: {source}")]
pub struct InstallError {
    name: String,
    #[source]
    source: kube::Error,
}

/// Applies every CRD that [`decide`] says to; returns what was done per CRD name.
pub async fn ensure(client: &Client) -> Result<Vec<(String, Decision)>, InstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut done = vec![];
    for crd in custom_resource_definitions() {
        let name = crd.name_any();
        let wrap = |source| InstallError { name: name.clone(), source };
        let live = api.get_opt(&name).await.map_err(wrap)?;
        let decision = decide(live.as_ref(), &crd);
        match &decision {
            Decision::Keep(why) => tracing::info!(crd = %name, "CRD kept: {why}"),
            Decision::Create | Decision::Upgrade { .. } => {
                api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&crd))
                    .await
                    .map_err(wrap)?;
                tracing::info!(crd = %name, ?decision, "CRD applied");
            }
        }
        done.push((name, decision));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::mock::{Mock, Step};

    fn ours(name: &str) -> CustomResourceDefinition {
        custom_resource_definitions().into_iter().find(|c| c.name_any() == name).unwrap()
    }

    fn with(mut crd: CustomResourceDefinition, version: Option<&str>, hash: Option<&str>) -> CustomResourceDefinition {
        let a = crd.metadata.annotations.get_or_insert_with(Default::default);
        a.clear();
        if let Some(v) = version {
            a.insert(OPERATOR_VERSION_ANNOTATION.into(), v.into());
        }
        if let Some(h) = hash {
            a.insert(CRD_HASH_ANNOTATION.into(), h.into());
        }
        crd
    }

    #[test]
    fn versions_order_numerically_with_pre_releases_first() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("0.10.0") > v("0.9.1"));
        assert!(v("1.0.0") > v("1.0.0-rc.1"));
        assert!(v("1.0.0-rc.2") > v("1.0.0-rc.1"));
        assert_eq!(Version::parse("1.0"), None);
        assert_eq!(Version::parse("1.0.0.0"), None);
    }

    #[test]
    fn decides_by_version_then_content() {
        let crd = ours("tenants.sextant.dev");
        let hash = crd.annotations()[CRD_HASH_ANNOTATION].clone();
        let version = crd.annotations()[OPERATOR_VERSION_ANNOTATION].clone();
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        assert_eq!(decide(None, &crd), Decision::Create);
        assert_eq!(decide(Some(&crd), &crd), Decision::Keep("up to date"));
        // Installed by Helm's crds/ from an older chart, without our annotations.
        assert_eq!(decide(Some(&with(crd.clone(), None, None)), &crd), Decision::Upgrade { from: None });
        assert_eq!(
            decide(Some(&with(crd.clone(), Some("0.0.1"), Some(&hash))), &crd),
            Decision::Upgrade { from: Some("0.0.1".into()) }
        );
        assert_eq!(
            decide(Some(&with(crd.clone(), Some("999.0.0"), Some("x"))), &crd),
            Decision::Keep("written by a newer operator")
        );
        // Same version, other content (a development build, or edited by hand).
        assert_eq!(
            decide(Some(&with(crd.clone(), Some(&version), Some("other"))), &crd),
            Decision::Upgrade { from: Some(version.clone()) }
        );
    }

    #[tokio::test]
    async fn ensure_creates_missing_upgrades_older_and_keeps_newer_crds() {
        let base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let mut steps = vec![];
        let mut expected = vec![];
        for (i, crd) in custom_resource_definitions().into_iter().enumerate() {
            let name = crd.name_any();
            let path = format!("{base}/{name}");
            let live = match i {
                0 => None,
                1 => Some(with(crd.clone(), Some("0.0.1"), Some("old"))),
                2 => Some(with(crd.clone(), Some("999.0.0"), Some("new"))),
                _ => Some(crd.clone()),
            };
            steps.push(match &live {
                None => Step::get(&path).not_found(),
                Some(l) => Step::get(&path).reply(200, serde_json::to_value(l).unwrap()),
            });
            let decision = decide(live.as_ref(), &crd);
            if matches!(decision, Decision::Create | Decision::Upgrade { .. }) {
                let want = name.clone();
                steps.push(Step::apply(&path).expect_body(move |b| {
                    assert_eq!(b["metadata"]["name"], want.as_str());
                    assert_eq!(b["metadata"]["annotations"][OPERATOR_VERSION_ANNOTATION], env!("CARGO_PKG_VERSION"));
                }));
            }
            expected.push((name, decision));
        }
        let mock = Mock::new();
        let client = mock.ctx.client.clone();
        let done = mock.run(steps, serde_json::json!({}), async move { ensure(&client).await }).await.unwrap();
        assert_eq!(done, expected);
        assert_eq!(done[0].1, Decision::Create);
        assert!(matches!(done[1].1, Decision::Upgrade { .. }));
        assert_eq!(done[2].1, Decision::Keep("written by a newer operator"));
        assert_eq!(done[3].1, Decision::Keep("up to date"));
    }
}
