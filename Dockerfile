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
# The base images are build arguments, named by tag here: pin each by the digest of its image
# index, `--build-arg RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:...`, as
# docs/install.md ("Pinning the base images") shows with `docker buildx imagetools inspect` and
# `crane digest`. The project's build machines reach no container registry, so no digest has
# been checked here, and none is written down unchecked. With digests pinned and
# SOURCE_DATE_EPOCH set, two builds of one commit differ only by what `apk add` fetched for the
# static build (Alpine's repository moves; its packages are build tools only, nothing of them is
# in the image).

ARG RUST_VERSION=1.89
# Each `name:tag` or `name:tag@sha256:<digest>`.
ARG BUILD_IMAGE=rust:${RUST_VERSION}-bookworm
ARG BUILD_IMAGE_STATIC=rust:${RUST_VERSION}-alpine
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG RUNTIME_IMAGE_STATIC=gcr.io/distroless/static-debian12:nonroot

# === glibc build ===
FROM ${BUILD_IMAGE} AS build
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
FROM ${BUILD_IMAGE_STATIC} AS build-static
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
FROM ${RUNTIME_IMAGE_STATIC} AS static
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
FROM ${RUNTIME_IMAGE}
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
