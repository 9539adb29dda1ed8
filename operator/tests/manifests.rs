//! The operator's manifests checked without a cluster: CRDs, CEL rules, the Helm chart and the
//! pod security of every pod it builds. One test binary with a module per file.

mod common;

mod cel_rules;
mod chart;
mod crds;
mod pod_security;
