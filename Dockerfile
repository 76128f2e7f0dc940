# The production image: the static scorerefresh binary on an empty base.
#
#   docker build -t "ghcr.io/scorerefresh/scorerefresh:$(cat VERSION)" \
#     --build-arg REVISION="$(git rev-parse HEAD)" .
#
# The version comes from the VERSION file (the release this tree is, see
# docs/releasing.md), so the image tag and `scorerefresh version` agree;
# --build-arg VERSION=... overrides it for a build that is not a release.
#
# The entrypoint is the binary and the default command `run`, so the same image
# runs the other commands too (`docker run IMAGE version`, `... replay --in F`).
# Only cmd/scorerefresh is built: the demo and its embedded server
# (cmd/scorerefresh-demo, FerretDB) never reach the image.
#
# The runtime base is scratch, not distroless: distroless has no version tags
# (only mutable ones such as :nonroot), and a digest that cannot be checked
# where this was written is worse than none. Every byte of the image thus comes
# from the pinned builder below: the binary, the CA bundle (TLS to Atlas) and
# an empty /data. TestManifestDockerfile (deploy/dockerfile_test.go) parses
# this file and checks the pins, CGO_ENABLED=0, the ldflags, the non-root user
# and the entrypoint.

# The build stage runs on the builder's own platform and cross-compiles, so a
# multi-platform build (docker buildx build --platform linux/amd64,linux/arm64)
# needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26.8-trixie AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
# Baked into `scorerefresh version` and the scorerefresh_build_info metric.
# VERSION has no default here: unset, it is read from the VERSION file, the
# one place a release's version is written.
ARG VERSION
ARG REVISION=unknown
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    VERSION="${VERSION:-$(cat VERSION)}" && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/scorerefresh ./cmd/scorerefresh
# The demo's embedded server must never be linked into the production binary.
RUN if go version -m /out/scorerefresh | grep -qi ferretdb; then \
      echo "FerretDB is linked into scorerefresh" >&2; exit 1; \
    fi
# /data belongs to the runtime user: mount a volume there for the files of
# snapshot and replay (the root filesystem is read-only in Kubernetes).
RUN mkdir -p /rootfs/data

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build --chown=65532:65532 /rootfs/ /
COPY --from=build /out/scorerefresh /usr/local/bin/scorerefresh
# Numeric, so Kubernetes' runAsNonRoot can verify it without an /etc/passwd.
USER 65532:65532
WORKDIR /data
# METRICS_ADDR's default: /metrics, /healthz, /readyz.
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/scorerefresh"]
CMD ["run"]
