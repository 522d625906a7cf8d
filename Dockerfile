# syntax=docker/dockerfile:1
# The operator's container image: built in a Rust image, run from distroless as a non-root
# user with nothing but the binary and the C runtime it links (glibc, libgcc).
#   docker build -t ghcr.io/example/gpucloud-operator:0.1.0 .
# See docs/install.md.

ARG RUST_VERSION=1.89

FROM rust:${RUST_VERSION}-bookworm AS build
# The commit the binary reports (`version`, `gpucloud_build_info`); .git is not in the context.
ARG GIT_COMMIT=
ENV GPUCLOUD_GIT_COMMIT=${GIT_COMMIT}
WORKDIR /src
COPY . .
# Cache mounts keep the registry and the build between builds; the binary is copied out of
# the cached target directory. --no-default-features leaves out the `sandbox` feature: the
# embedded API server, the cloud simulator and the sandbox (the `apiserver`, `simulator` and
# `dev` subcommands) are for development and tests, and a production image should carry
# neither their code nor their dependencies.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --no-default-features --bin gpucloud-operator \
    && install -D -m 0755 target/release/gpucloud-operator /out/gpucloud-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/gpucloud-operator /usr/local/bin/gpucloud-operator
# distroless's nonroot user; the chart's pod securityContext names the same ids.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpucloud-operator"]
CMD ["run"]
