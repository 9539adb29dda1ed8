//! Growing the nodes' volumes through `spec.storage.volumeSize`, as a pure step function.
//!
//! A StatefulSet's `volumeClaimTemplates` cannot change, so the operator keeps the live
//! StatefulSet's claim template while it expands each PVC (when the StorageClass allows it),
//! then deletes the StatefulSet with `propagationPolicy: Orphan` (pods and PVCs stay) and applies
//! it again with the new size; the new StatefulSet adopts the running pods. A change the
//! template cannot take (a smaller size, another storage class) is reported as a condition and
//! never applied, so the rest of the cluster keeps being reconciled.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::conditions::Desired;

pub const VOLUME_EXPANSION: &str = "VolumeExpansion";
pub const STORAGE_SPEC_DRIFT: &str = "StorageSpecDrift";

/// The `data` claim template of a StatefulSet: what its PVCs are created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimTemplate {
    pub size: String,
    pub class: Option<String>,
}

impl ClaimTemplate {
    pub fn of(sts: &StatefulSet) -> Option<Self> {
        let claim = sts
            .spec
            .as_ref()?
            .volume_claim_templates
            .as_ref()?
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some("data"))?;
        let spec = claim.spec.as_ref()?;
        let size = spec.resources.as_ref()?.requests.as_ref()?.get("storage")?.0.clone();
        Some(Self { size, class: spec.storage_class_name.clone() })
    }
}

/// One node's PVC as observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Volume {
    pub ordinal: i32,
    /// `spec.resources.requests.storage`, in bytes.
    pub requested: Option<u128>,
    /// `status.capacity.storage`, in bytes.
    pub capacity: Option<u128>,
    pub class: Option<String>,
    /// The PVC's `FileSystemResizePending` condition: the volume grew, the file system waits for
    /// the pod to restart (drivers without online expansion).
    pub file_system_resize_pending: bool,
}

impl Volume {
    pub fn of(ordinal: i32, pvc: &PersistentVolumeClaim) -> Self {
        let spec = pvc.spec.as_ref();
        let requested = spec
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .and_then(|q| bytes(&q.0));
        let status = pvc.status.as_ref();
        let capacity =
            status.and_then(|s| s.capacity.as_ref()).and_then(|c| c.get("storage")).and_then(|q| bytes(&q.0));
        let file_system_resize_pending = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "FileSystemResizePending" && c.status == "True"));
        Self {
            ordinal,
            requested,
            capacity,
            class: spec.and_then(|s| s.storage_class_name.clone()),
            file_system_resize_pending,
        }
    }
}

/// Whether the volumes' StorageClass allows expansion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expansion {
    Allowed,
    /// Why not, for the condition's message.
    Refused(String),
}

/// What the reconcile knows before deciding.
#[derive(Debug, Clone, Default)]
pub struct Inputs<'a> {
    /// `spec.storage.volumeSize` and `storageClassName`.
    pub size: &'a str,
    pub class: Option<&'a str>,
    /// The live StatefulSet's claim template; `None` when there is no StatefulSet (yet).
    pub live: Option<&'a ClaimTemplate>,
    /// The PVCs of the StatefulSet's ordinals, read only when [`needs_volumes`] says so.
    pub volumes: &'a [Volume],
    /// Looked up only when the volumes must grow.
    pub expansion: Option<Expansion>,
    /// A scaling operation is in progress: the StatefulSet is not recreated meanwhile.
    pub scaling: bool,
    /// `VolumeExpansion` was True: an expansion is being followed until every volume has grown.
    pub expanding: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct VolumePlan {
    /// The claim template to apply: the live one whenever the spec's cannot be applied (yet).
    pub claim: Option<ClaimTemplate>,
    /// Ordinals whose PVC request is raised to `spec.storage.volumeSize`.
    pub grow: Vec<i32>,
    /// Delete the StatefulSet with orphan propagation; the next reconcile applies it anew.
    pub recreate_statefulset: bool,
    /// `VolumeExpansion`, when there is something to say (absent on clusters never expanded).
    pub expansion: Option<Desired>,
    /// `StorageSpecDrift`.
    pub drift: Option<Desired>,
}

/// Whether the PVCs (and the StorageClass) must be read: the size differs from the live
/// template's, or an expansion is being followed.
pub fn needs_volumes(size: &str, live: Option<&ClaimTemplate>, expanding: bool) -> bool {
    expanding || live.is_some_and(|l| bytes(&l.size) != bytes(size))
}

/// The storage class whose `allowVolumeExpansion` decides: the PVCs' (the default class was
/// written into them at creation), else the template's.
pub fn storage_class_of<'a>(volumes: &'a [Volume], live: Option<&'a ClaimTemplate>) -> Option<&'a str> {
    volumes.iter().find_map(|v| v.class.as_deref()).or_else(|| live.and_then(|l| l.class.as_deref()))
}

pub fn plan(i: &Inputs<'_>) -> VolumePlan {
    let mut p = VolumePlan::default();
    let Some(live) = i.live else {
        // A new (or recreated) StatefulSet takes the spec as it is; an expansion being followed
        // is reported until its volumes have grown.
        if i.expanding {
            p.expansion = Some(progress(i, false));
        }
        return p;
    };
    let mut claim = ClaimTemplate { size: i.size.to_owned(), class: i.class.map(str::to_owned) };
    if live.class != claim.class {
        claim.class = live.class.clone();
        p.drift = Some(Desired::new(
            STORAGE_SPEC_DRIFT,
            true,
            "StorageClassChanged",
            format!(
                "spec.storage.storageClassName is {} but the volumes were created with {}: a volume's class \
                 cannot change, so the StatefulSet keeps {}; set the field back",
                show(i.class),
                show(live.class.as_deref()),
                show(live.class.as_deref())
            ),
        ));
    } else {
        p.drift = Some(Desired::new(STORAGE_SPEC_DRIFT, false, "InSync", ""));
    }
    let (Some(want), Some(have)) = (bytes(i.size), bytes(&live.size)) else {
        claim.size = live.size.clone();
        p.claim = Some(claim);
        p.expansion = Some(Desired::new(
            VOLUME_EXPANSION,
            false,
            "InvalidSize",
            format!("volumeSize {} or the StatefulSet's {} is not a quantity", i.size, live.size),
        ));
        return p;
    };
    if want < have {
        claim.size = live.size.clone();
        p.claim = Some(claim);
        p.expansion = Some(Desired::new(
            VOLUME_EXPANSION,
            false,
            "ShrinkRefused",
            format!("volumeSize {} is below the volumes' {}: volumes cannot shrink; set it back", i.size, live.size),
        ));
        return p;
    }
    if want == have {
        p.claim = Some(claim);
        if i.expanding {
            p.expansion = Some(progress(i, false));
        }
        return p;
    }
    // Growing: the live template stays until every PVC asks for the new size.
    claim.size = live.size.clone();
    p.claim = Some(claim);
    match &i.expansion {
        Some(Expansion::Allowed) => {}
        Some(Expansion::Refused(why)) => {
            p.expansion = Some(Desired::new(VOLUME_EXPANSION, false, "NotSupported", why.clone()));
            return p;
        }
        None => {
            p.expansion = Some(Desired::new(
                VOLUME_EXPANSION,
                false,
                "NotSupported",
                "the volumes have no StorageClass, so they cannot be expanded",
            ));
            return p;
        }
    }
    p.grow = i.volumes.iter().filter(|v| v.requested.is_none_or(|r| r < want)).map(|v| v.ordinal).collect();
    // Every existing PVC now asks for the new size: new ones must too.
    p.recreate_statefulset = !i.scaling;
    p.expansion = Some(progress(i, p.recreate_statefulset));
    p
}

/// `VolumeExpansion` while (or after) volumes grow to `size`.
fn progress(i: &Inputs<'_>, recreating: bool) -> Desired {
    let want = bytes(i.size);
    let grown = i.volumes.iter().filter(|v| want.is_some_and(|w| v.capacity.is_some_and(|c| c >= w))).count();
    let total = i.volumes.len();
    if grown == total && !recreating {
        return Desired::new(VOLUME_EXPANSION, false, "Expanded", format!("{total} volumes at {}", i.size));
    }
    let mut message = format!("{grown}/{total} volumes at {}", i.size);
    let pending = i.volumes.iter().filter(|v| v.file_system_resize_pending).count();
    if pending > 0 {
        message.push_str(&format!("; {pending} wait for their pod to restart to resize the file system"));
    }
    if recreating {
        message.push_str("; recreating the StatefulSet with the new size (pods keep running)");
    } else if i.scaling {
        message.push_str("; the StatefulSet takes the new size once scaling ends");
    }
    Desired::new(VOLUME_EXPANSION, true, "Expanding", message)
}

fn show(class: Option<&str>) -> String {
    class.map_or_else(|| "unset".to_owned(), |c| format!("{c:?}"))
}

/// A Kubernetes quantity in bytes, rounded up; `None` when it is not one (or does not fit).
pub fn bytes(q: &str) -> Option<u128> {
    let q = q.trim();
    let number_end = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (number, suffix) = q.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') || number.len() > 30 {
        return None;
    }
    let digits: u128 = format!("{whole}{fraction}").parse().ok()?;
    let binary = |power: u32| 1024u128.checked_pow(power);
    // (multiplier, decimal exponent)
    let (multiplier, exponent): (u128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (binary(1)?, 0),
        "Mi" => (binary(2)?, 0),
        "Gi" => (binary(3)?, 0),
        "Ti" => (binary(4)?, 0),
        "Pi" => (binary(5)?, 0),
        "Ei" => (binary(6)?, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse::<i32>().ok().filter(|e| (-30..=30).contains(e))?),
        _ => return None,
    };
    let scale = exponent - i32::try_from(fraction.len()).ok()?;
    let value = digits.checked_mul(multiplier)?;
    if scale >= 0 {
        value.checked_mul(10u128.checked_pow(scale.unsigned_abs())?)
    } else {
        let divisor = 10u128.checked_pow(scale.unsigned_abs())?;
        Some(value.div_ceil(divisor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u128 = 1 << 30;

    #[test]
    fn quantities_parse_to_bytes() {
        assert_eq!(bytes("10Gi"), Some(10 * GI));
        assert_eq!(bytes("1.5Gi"), Some(3 * GI / 2));
        assert_eq!(bytes("100G"), Some(100_000_000_000));
        assert_eq!(bytes("10737418240"), Some(10 * GI));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(bytes("1500m"), Some(2), "rounded up");
        assert_eq!(bytes("0.5"), Some(1));
        for bad in ["", "Gi", "1.2.3Gi", "10GB", "-1Gi", "1e99", "9999999999999999999999999999999Ei"] {
            assert_eq!(bytes(bad), None, "{bad}");
        }
    }

    fn volume(ordinal: i32, requested: &str, capacity: &str) -> Volume {
        Volume {
            ordinal,
            requested: bytes(requested),
            capacity: bytes(capacity),
            class: Some("gp3".into()),
            file_system_resize_pending: false,
        }
    }

    fn live(size: &str) -> ClaimTemplate {
        ClaimTemplate { size: size.into(), class: Some("gp3".into()) }
    }

    #[test]
    fn an_unchanged_size_reads_nothing_and_says_nothing() {
        assert!(!needs_volumes("10Gi", Some(&live("10Gi")), false));
        assert!(!needs_volumes("10737418240", Some(&live("10Gi")), false), "the same size written otherwise");
        assert!(!needs_volumes("20Gi", None, false), "no StatefulSet yet: created with the spec's size");
        let l = live("10Gi");
        let p = plan(&Inputs { size: "10Gi", class: Some("gp3"), live: Some(&l), ..Inputs::default() });
        assert_eq!(p.claim, Some(live("10Gi")));
        assert!(p.expansion.is_none() && p.grow.is_empty() && !p.recreate_statefulset);
        assert_eq!(p.drift.map(|d| d.status), Some(false));
    }

    #[test]
    fn growing_patches_every_smaller_claim_and_recreates_the_statefulset() {
        let l = live("10Gi");
        let volumes = [volume(0, "20Gi", "10Gi"), volume(1, "10Gi", "10Gi"), volume(2, "10Gi", "10Gi")];
        assert!(needs_volumes("20Gi", Some(&l), false));
        let p = plan(&Inputs {
            size: "20Gi",
            class: Some("gp3"),
            live: Some(&l),
            volumes: &volumes,
            expansion: Some(Expansion::Allowed),
            ..Inputs::default()
        });
        assert_eq!(p.grow, vec![1, 2]);
        // The apply keeps the live template: the StatefulSet would refuse another one.
        assert_eq!(p.claim, Some(live("10Gi")));
        assert!(p.recreate_statefulset);
        let c = p.expansion.unwrap();
        assert!(c.status && c.reason == "Expanding", "{c:?}");
        assert!(c.message.starts_with("0/3 volumes at 20Gi"), "{}", c.message);
    }

    #[test]
    fn growing_during_a_scaling_operation_patches_but_keeps_the_statefulset() {
        let l = live("10Gi");
        let volumes = [volume(0, "10Gi", "10Gi")];
        let p = plan(&Inputs {
            size: "20Gi",
            class: Some("gp3"),
            live: Some(&l),
            volumes: &volumes,
            expansion: Some(Expansion::Allowed),
            scaling: true,
            ..Inputs::default()
        });
        assert_eq!(p.grow, vec![0]);
        assert!(!p.recreate_statefulset);
        assert!(p.expansion.unwrap().message.contains("once scaling ends"));
    }

    #[test]
    fn a_class_without_expansion_is_reported_and_nothing_changes() {
        let l = live("10Gi");
        let volumes = [volume(0, "10Gi", "10Gi")];
        let p = plan(&Inputs {
            size: "20Gi",
            class: Some("gp3"),
            live: Some(&l),
            volumes: &volumes,
            expansion: Some(Expansion::Refused("StorageClass \"gp3\" does not allow volume expansion".into())),
            ..Inputs::default()
        });
        assert!(p.grow.is_empty() && !p.recreate_statefulset);
        assert_eq!(p.claim, Some(live("10Gi")));
        let c = p.expansion.unwrap();
        assert_eq!((c.status, c.reason.as_str()), (false, "NotSupported"));
        // No class at all is the same.
        let p = plan(&Inputs { size: "20Gi", class: None, live: Some(&l), volumes: &volumes, ..Inputs::default() });
        assert_eq!(p.expansion.unwrap().reason, "NotSupported");
    }

    #[test]
    fn a_smaller_size_is_refused_and_the_live_template_kept() {
        let l = live("10Gi");
        let p = plan(&Inputs { size: "5Gi", class: Some("gp3"), live: Some(&l), ..Inputs::default() });
        assert_eq!(p.claim, Some(live("10Gi")));
        assert!(p.grow.is_empty() && !p.recreate_statefulset);
        assert_eq!(p.expansion.unwrap().reason, "ShrinkRefused");
    }

    #[test]
    fn another_storage_class_is_reported_and_the_live_class_kept() {
        let l = live("10Gi");
        let p = plan(&Inputs { size: "10Gi", class: Some("io2"), live: Some(&l), ..Inputs::default() });
        assert_eq!(p.claim, Some(live("10Gi")));
        let d = p.drift.unwrap();
        assert_eq!((d.status, d.reason.as_str()), (true, "StorageClassChanged"));
        // Added where the volumes were made without one.
        let none = ClaimTemplate { size: "10Gi".into(), class: None };
        let p = plan(&Inputs { size: "10Gi", class: Some("gp3"), live: Some(&none), ..Inputs::default() });
        assert_eq!(p.claim.unwrap().class, None);
        assert!(p.drift.unwrap().status);
    }

    #[test]
    fn after_the_recreation_progress_is_followed_until_every_volume_grew() {
        let l = live("20Gi");
        let volumes = [volume(0, "20Gi", "20Gi"), volume(1, "20Gi", "10Gi")];
        assert!(needs_volumes("20Gi", Some(&l), true));
        let inputs = Inputs {
            size: "20Gi",
            class: Some("gp3"),
            live: Some(&l),
            volumes: &volumes,
            expanding: true,
            ..Inputs::default()
        };
        let c = plan(&inputs).expansion.unwrap();
        assert_eq!((c.status, c.message.as_str()), (true, "1/2 volumes at 20Gi"));
        let mut volumes = volumes.to_vec();
        volumes[1].file_system_resize_pending = true;
        let c = plan(&Inputs { volumes: &volumes, ..inputs.clone() }).expansion.unwrap();
        assert!(c.message.contains("1 wait for their pod to restart"), "{}", c.message);
        volumes[1].capacity = bytes("20Gi");
        volumes[1].file_system_resize_pending = false;
        let c = plan(&Inputs { volumes: &volumes, ..inputs }).expansion.unwrap();
        assert_eq!((c.status, c.reason.as_str(), c.message.as_str()), (false, "Expanded", "2 volumes at 20Gi"));
    }

    #[test]
    fn claim_template_and_volume_are_read_from_the_objects() {
        let sts: StatefulSet = serde_json::from_value(serde_json::json!({
            "spec": {"selector": {}, "serviceName": "x", "template": {}, "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"storageClassName": "gp3", "resources": {"requests": {"storage": "10Gi"}}}}]}
        }))
        .unwrap();
        assert_eq!(ClaimTemplate::of(&sts), Some(live("10Gi")));
        let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "spec": {"storageClassName": "gp3", "resources": {"requests": {"storage": "20Gi"}}},
            "status": {"capacity": {"storage": "10Gi"}, "conditions": [{"type": "FileSystemResizePending", "status": "True"}]}
        }))
        .unwrap();
        let v = Volume::of(2, &pvc);
        assert_eq!(
            v,
            Volume {
                ordinal: 2,
                requested: bytes("20Gi"),
                capacity: bytes("10Gi"),
                class: Some("gp3".into()),
                file_system_resize_pending: true
            }
        );
    }
}
