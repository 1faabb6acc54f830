# aep in a container (docs/deploy.md). No Docker engine runs in this
# project's CI, so the image is not built there; .ci/run instead checks
# that the same static binary serves as uid 65534, the image's user.
#
#   docker build -t aep .
#   docker run -p 8765:8765 -e AEP_AUTH_TOKEN=... aep
#
# Isolation (docs/SECURITY.md, Isolation): the image runs as uid 65534
# without capabilities, so `server.isolation.sandbox: auto` picks tier (b),
# `supervised`: no namespaces; Landlock (kernel 5.13 or later) confines
# paths, rlimits bound the rest. Tier (a) needs more than the default:
# `bwrap` needs bubblewrap in the image and unprivileged user namespaces
# allowed by the runtime (a seccomp profile permitting unshare/clone with
# CLONE_NEWUSER); `namespaces` needs root with CAP_SYS_ADMIN.

# --- build: a static binary, no cgo (SQLite is modernc.org/sqlite, pure Go).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version and commit `aep version` and the aep_build_info metric
# report (docs/operating.md, Versions):
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) --build-arg COMMIT=$(git rev-parse HEAD) -t aep .
# .dockerignore keeps .git out of the build context, so unset, the image
# reports version devel and commit unknown.
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags="-s -w -X github.com/aephost/aep/internal/version.version=${VERSION} -X github.com/aephost/aep/internal/version.commit=${COMMIT}" -o /out/aep ./cmd/aep

# --- run: a small Debian, so the commands sessions run (run_command,
# proc) find a shell and the usual tools; the host itself needs nothing
# of it.
FROM debian:bookworm-slim
RUN mkdir -p /var/lib/aep && chown 65534:65534 /var/lib/aep && chmod 0700 /var/lib/aep
COPY --from=build /out/aep /usr/local/bin/aep
USER 65534:65534
WORKDIR /var/lib/aep
# The main listener: sessions, /healthz, /readyz. Bind all addresses in a
# container; list the names clients use in server.allowed_origins.
EXPOSE 8765
ENTRYPOINT ["/usr/local/bin/aep"]
CMD ["serve", "--listen", "0.0.0.0:8765", "--data-dir", "/var/lib/aep"]
