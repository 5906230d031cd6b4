# syntax=docker/dockerfile:1
#
# One image for every Postline binary: the command picks which one runs.
#
#   docker build -t postline .
#   docker run --rm postline worker -h
#   docker run --rm postline retry-scheduler -h
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
    go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/worker ./cmd/retry-scheduler ./cmd/postctl

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/ /usr/local/bin/
# 65532 is distroless's nonroot user; numeric so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# Worker metrics and probes (POSTLINE_HTTP_ADDR), scheduler's (POSTLINE_SCHEDULER_HTTP_ADDR).
EXPOSE 8081 8082
CMD ["worker"]
