# syntax=docker/dockerfile:1
#
# One image for every Postline binary: the command picks which one runs.
#
#   docker build -t postline .
#   docker run --rm postline worker -h
#   docker run --rm postline retry-scheduler -h
#   docker run --rm postline bounce-receiver -h
#   docker run --rm postline webhook-dispatcher -h
#   docker run --rm postline console -h
#   docker run --rm postline postctl --help
#
# The binaries are static (CGO_ENABLED=0), so the final stage needs no libc and no shell.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w" -o /out/ \
    ./cmd/worker ./cmd/retry-scheduler ./cmd/bounce-receiver ./cmd/webhook-dispatcher ./cmd/console ./cmd/postctl

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/ /usr/local/bin/
# 65532 is distroless's nonroot user; numeric so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# Metrics and probes of the worker (POSTLINE_HTTP_ADDR), the scheduler (POSTLINE_SCHEDULER_HTTP_ADDR),
# the bounce-receiver (POSTLINE_RECEIVER_HTTP_ADDR), the webhook-dispatcher
# (POSTLINE_WEBHOOKS_HTTP_ADDR) and the console (POSTLINE_CONSOLE_HTTP_ADDR); the bounce-receiver's
# SMTP server (POSTLINE_BOUNCE_SMTP_ADDR). The console's own pages (POSTLINE_CONSOLE_ADDR) are on
# loopback unless it is given a certificate: publish the port you set.
EXPOSE 8081 8082 8083 8084 8085 2525
CMD ["worker"]
