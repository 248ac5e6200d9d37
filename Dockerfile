# syntax=docker/dockerfile:1
#
# The sidecar's image: a static binary on an empty base (no shell, no package manager,
# nothing to patch but the binary). Build it from the repository's root:
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t fanout:dev .
#
# deploy/kubernetes/check (run by `make manifests`, part of `make test`) checks this
# file's claims without a Docker engine, and builds the binary with this file's own
# `go build` command line to check that it is static. That test reads the RUN line
# that holds `go build`: keep it one plain command (variables as ${NAME}, no &&).

# The builder runs on the build host's platform and cross-compiles for the target's:
# `docker buildx build --platform linux/amd64,linux/arm64 ...` needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
WORKDIR /src

# The modules first, in a layer of their own: a change to the source alone does not
# download them again.
COPY go.mod go.sum ./
RUN go mod download

COPY . .

# VERSION is what `sidecar version` and fanout_build_info{version} say. The VCS
# revision is not recorded: .dockerignore leaves .git out of the context, hence
# -buildvcs=false (revision "unknown").
ARG VERSION=dev
# Set by BuildKit from --platform (the target's OS and architecture).
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false -ldflags="-s -w -X main.version=${VERSION}" -o /out/sidecar ./cmd/sidecar

FROM scratch
# CA roots for any outbound TLS the binary may make; peer mTLS uses --peer-tls-ca.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/sidecar /sidecar
# A numeric user, so that Kubernetes' runAsNonRoot can verify it (65532: distroless's
# "nonroot"). The sidecar writes nothing outside --data-dir, so a read-only root works.
USER 65532:65532
# 7071: the peer listener (--peer-addr). 9090: the admin listener (--admin-addr):
# /metrics, /healthz, /readyz and gRPC health for the probes. The app listener stays on
# the pod's loopback (127.0.0.1:7070) and is not exposed.
EXPOSE 7071 9090
ENTRYPOINT ["/sidecar", "serve"]
