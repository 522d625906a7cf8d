# syntax=docker/dockerfile:1
# The operator's container image: built in a Rust image, run from distroless as a non-root
# user with nothing but the binary and the C runtime it links (glibc, libgcc).
# scripts/release.sh prints the build command with its arguments (target/dist/docker-build.sh);
# see docs/install.md.
#
# The base images are named by tag, not yet by digest: pin each one (`FROM image:tag@sha256:...`)
# with the digest `docker buildx imagetools inspect rust:1.89-bookworm` (and
# `gcr.io/distroless/cc-debian12:nonroot`) prints for the image index.

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
# The OCI labels, from the build arguments scripts/release.sh passes.
ARG VERSION=
ARG GIT_COMMIT=
ARG BUILD_DATE=
ARG SOURCE_URL=
LABEL org.opencontainers.image.title="gpucloud-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.source="${SOURCE_URL}"
COPY --from=build /out/gpucloud-operator /usr/local/bin/gpucloud-operator
# distroless's nonroot user; the chart's pod securityContext names the same ids.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpucloud-operator"]
CMD ["run"]
