# syntax=docker/dockerfile:1
# The operator's container image, two ways (docs/install.md, "The image"):
#   docker build .                   (default) the binary linked against glibc, run from
#                                    distroless/cc: no shell, no package manager
#   docker build --target static .   a static binary (musl), run from distroless/static, which
#                                    has no C library at all; builds for any platform buildx
#                                    is given (--platform linux/amd64,linux/arm64)
# Both run as distroless's non-root user. scripts/release.sh prints the build command with its
# arguments (target/dist/docker-build.sh).
#
# The base images are named by tag. Pin each by the digest of its image index
# (`FROM image:tag@sha256:...`), which `docker buildx imagetools inspect IMAGE:TAG` prints: the
# project's build machines reach no container registry, so no digest here has been checked, and
# none is written down unchecked. With digests pinned and SOURCE_DATE_EPOCH set, two builds of
# one commit differ only by what `apk add` fetched for the static build (Alpine's repository
# moves; its packages are build tools only, nothing of them is in the image).

ARG RUST_VERSION=1.89

# === glibc build ===
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

# === static (musl) build ===
# Alpine's Rust targets musl and links statically by default; jemalloc (tikv-jemallocator) and
# ring compile their C parts with its gcc and make.
FROM rust:${RUST_VERSION}-alpine AS build-static
ARG GIT_COMMIT=
ENV GPUCLOUD_GIT_COMMIT=${GIT_COMMIT}
RUN apk add --no-cache musl-dev gcc make
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --no-default-features --bin gpucloud-operator \
    && install -D -m 0755 target/release/gpucloud-operator /out/gpucloud-operator

# === static image ===
FROM gcr.io/distroless/static-debian12:nonroot AS static
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
COPY --from=build-static /out/gpucloud-operator /usr/local/bin/gpucloud-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpucloud-operator"]
CMD ["run"]

# === default image (glibc) ===
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
