# Sourced by the benchmark scripts. `start_dev BIN` starts a fresh `sextant dev` of BIN on free
# ports in a new temporary directory, and waits until it answers and has written its
# credentials; it sets WORK (the directory), PORT, INTERNAL (the metrics port) and PID.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_dev() {
  WORK=$(mktemp -d)
  PORT=$(free_port); INTERNAL=$(free_port)
  local grpc; grpc=$(free_port)
  "$1" dev --data-dir "$WORK/d" --listen "127.0.0.1:$PORT" --internal-listen "127.0.0.1:$INTERNAL" \
    --otlp-grpc-listen "127.0.0.1:$grpc" --api-rps 1000000 --ingest-rps 1000000 --analytics-rps 1000000 \
    >"$WORK/dev.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.1; done
  for _ in $(seq 1 300); do [ -s "$WORK/d/credentials.json" ] && break; sleep 0.1; done
}
