#!/usr/bin/env bash
# End-to-end test on a real Kubernetes cluster (kind), for machines that have Docker and kind.
# Not part of CI (no Docker there). Needs: docker, kind, kubectl, helm, curl.
#
#   scripts/e2e-kind.sh            # build the image, create a kind cluster, run, delete it
#   KEEP=1 scripts/e2e-kind.sh     # keep the kind cluster afterwards
#
# Install with Helm → cluster Available → a refused scale-in is Blocked → tenant, project and
# alert rule become Ready and the project's Secret works for ingest → 3 → 5 → 3 nodes.
set -euo pipefail
cd "$(dirname "$0")/.."

NAME=sextant-e2e
NS=telemetry
IMAGE=sextant:e2e
k() { kubectl --context "kind-$NAME" -n "$NS" "$@"; }
step() { echo "== $*"; }
wait_for() { # wait_for <seconds> <description> <command...>
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "timed out waiting for $what" >&2; k get sextantcluster,tenants,projects,alertrules -o wide >&2 || true; exit 1; }
    sleep 5
  done
}
nodes_settled() { # nodes_settled <n>: status.storageNodes is n and no scaling step is recorded
  [[ "$(k get sextantcluster obs -o jsonpath='{.status.storageNodes}/{.status.scaling}')" == "$1/" ]]
}

for tool in docker kind kubectl helm curl; do command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }; done

step "image"
docker build -q -t "$IMAGE" . >/dev/null
kind get clusters | grep -qx "$NAME" || kind create cluster --name "$NAME" --wait 120s
[[ -n "${KEEP:-}" ]] || trap 'kind delete cluster --name "$NAME"' EXIT
kind load docker-image "$IMAGE" --name "$NAME"

step "install"
# Small requests: the default ones (500m CPU per node) would leave a 5-node scale-out Pending on
# a laptop-sized kind node.
helm --kube-context "kind-$NAME" upgrade --install sextant charts/sextant -n "$NS" --create-namespace --wait \
  --set image.repository=sextant --set image.tag=e2e --set image.pullPolicy=Never \
  --set operator.replicas=2 --set cluster.enabled=true --set cluster.name=obs \
  --set cluster.storage.volumeSize=1Gi \
  --set cluster.storage.resources.requests.cpu=100m --set cluster.storage.resources.requests.memory=128Mi \
  --set cluster.routers.resources.requests.cpu=50m --set cluster.routers.resources.requests.memory=64Mi
k wait sextantcluster/obs --for=condition=Available --timeout=10m
k get secret obs-internal >/dev/null

step "scale-in below replicationFactor is refused"
k patch sextantcluster obs --type merge -p '{"spec":{"storage":{"nodes":2}}}'
k wait sextantcluster/obs --for=condition=Blocked --timeout=2m
[[ "$(k get statefulset obs-node -o jsonpath='{.spec.replicas}')" == 3 ]]
k patch sextantcluster obs --type merge -p '{"spec":{"storage":{"nodes":3}}}'
k wait sextantcluster/obs --for=condition=Blocked=false --timeout=2m

step "tenant, project, alert rule"
k apply -f crds/examples/tenant.yaml -f crds/examples/project.yaml -f crds/examples/alertrule.yaml -f crds/examples/quota.yaml
k wait tenant/acme project/checkout alertrule/checkout-latency quota/checkout-burst --for=condition=Ready --timeout=3m
api_key="$(k get secret checkout-credentials -o jsonpath='{.data.api-key}' | base64 -d)"
[[ "$api_key" == sxk_* ]]
k port-forward svc/obs-router 18080:8080 >/dev/null 2>&1 &
pf=$!
wait_for 30 "port-forward" curl -sf http://127.0.0.1:18080/healthz
status="$(curl -s -o /dev/null -w '%{http_code}' -X POST http://127.0.0.1:18080/api/v1/ingest/spans \
  -H "X-API-Key: $api_key" -H 'Content-Type: application/json' \
  -d '{"spans":[{"trace_id":"e2e1","span_id":"s1","service_name":"checkout","operation":"GET /","timestamp":"2026-11-22T10:00:00Z","duration_ms":3}]}')"
kill "$pf"
[[ "$status" == 200 ]] || { echo "ingest with the project's API key answered $status" >&2; exit 1; }

step "scale 3 -> 5 -> 3"
k scale sextantcluster obs --replicas 5
wait_for 900 "scale-out to 5" nodes_settled 5
k scale sextantcluster obs --replicas 3
wait_for 900 "scale-in to 3" nodes_settled 3
! k get pvc data-obs-node-4 >/dev/null 2>&1 || { echo "volume of removed node 4 still exists" >&2; exit 1; }

step "deleting the project deletes its data; the tenant goes after it"
k delete tenant acme --wait=false
k delete project checkout --timeout=3m
k wait tenant/acme --for=delete --timeout=3m
echo "e2e: ok"
