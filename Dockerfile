# lockproxy container: a static binary on a distroless base, run as non-root.
# Build:  docker build -t lockproxy .
# Run:    docker run -e LOCKPROXY_REQUIREPASS=… -p 6380:6380 -p 9121:9121 lockproxy
#         docker run -e LOCKPROXY_REQUIREPASS=… -p 6380:6380 lockproxy --backend quorum --quorum-nodes r1:6379,r2:6379,r3:6379
#
# Secure by default: the container listens on 0.0.0.0 and protected mode
# stays on, so it refuses to start (exit 2, "protected-mode: listen
# 0.0.0.0:6380 reaches beyond loopback and clients need no password …")
# until clients must authenticate: LOCKPROXY_REQUIREPASS (or users in a
# mounted config file). Serving without a password is an explicit choice:
# -e LOCKPROXY_PROTECTED_MODE=no.
# (No Docker engine exists on the CI machines: tests/ops_docker_test.go
# builds and runs what this file says, and checks each claim made here.)

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# docker build --build-arg VERSION=v1.4.0 . names the release (lockproxy --version).
ARG VERSION
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/lockproxy ./cmd/lockproxy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockproxy /lockproxy
USER nonroot:nonroot
# Inside a container the listeners must bind beyond loopback (see above:
# protected mode then requires a password, for both ports). The admin
# port serves /metrics, /healthz and /readyz to anyone; the locks (tokens
# included) and the status page to the users that RESP's AUTH accepts,
# over HTTP Basic; force-release only to those of them allowed LOCKPROXY
# RELEASE (the default user, and users with admin: true).
ENV LOCKPROXY_LISTEN=0.0.0.0:6380 \
    LOCKPROXY_ADMIN_LISTEN=0.0.0.0:9121
EXPOSE 6380 9121
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD ["/lockproxy", "--healthcheck", "--admin-listen", "127.0.0.1:9121"]
ENTRYPOINT ["/lockproxy"]
