# The `sextant` image: one binary for nodes, routers and the operator.
#   docker build -t ghcr.io/sextant-dev/sextant:0.1.0 .
# fjall needs Rust 1.90, kube 1.89; this is the toolchain the workspace is tested with.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# python3 runs the profiling workload; llvm-profdata comes with the toolchain's llvm-tools.
RUN apt-get update && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* && rustup component add llvm-tools
COPY . .
# protoc comes from protoc-bin-vendored; jemalloc needs the C toolchain of this image. The
# production profile is the release build optimized as one unit (Cargo.toml), and
# scripts/pgo_build.sh builds it twice: instrumented, to profile a workload of ingest and
# reads on 127.0.0.1, then optimized with that profile (docs/BENCHMARKS.md, "Built with a
# profile of its own work").
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cp "$(scripts/pgo_build.sh)" /usr/local/bin/sextant

FROM debian:bookworm-slim
# /bin/sh stays: node pods derive their Raft id from the StatefulSet ordinal in a shell line.
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin sextant
COPY --from=build /usr/local/bin/sextant /usr/local/bin/sextant
USER 10001
EXPOSE 8080 9090 4317 7000 7001
ENTRYPOINT ["sextant"]
