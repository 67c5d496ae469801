# combkv in a container (docs/operations.md, "Deploying").
#
#   docker build -t combkv .
#   docker run -e COMBKV_REQUIREPASS=... -p 6380:6380 -p 11212:11212 \
#       -v combkv-data:/data combkv
#
# The listeners are on every interface inside the container, so protected
# mode wants a password (COMBKV_REQUIREPASS, or an ACL file with
# COMBKV_ACLFILE) or TLS client certificates; without one the server
# refuses to start and says so.
FROM rust:1.88-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p combkv-cli

FROM debian:bookworm-slim
RUN useradd --system --home-dir /data --shell /usr/sbin/nologin combkv \
    && mkdir /data && chown combkv:combkv /data
COPY --from=build /src/target/release/combkv /usr/local/bin/combkv
USER combkv
ENV COMBKV_RESP=0.0.0.0:6380 \
    COMBKV_MEMCACHED=0.0.0.0:11212 \
    COMBKV_DATA_DIR=/data \
    COMBKV_LOG_FORMAT=json
VOLUME /data
EXPOSE 6380 11212
STOPSIGNAL SIGTERM
ENTRYPOINT ["combkv", "serve"]
