# Stand-in for redis:7.4 (REDIS_IMAGE) where no registry is reachable (tests/deploy): Debian's Redis on
# the debootstrap base, run like the official image (as `redis`, in /data, reachable from other
# containers: protected mode off, as the official image builds it).
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server"]
