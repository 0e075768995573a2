# Stand-in for postgres:17 (POSTGRES_IMAGE) where no registry is reachable (tests/deploy): Debian's
# PostgreSQL on the debootstrap base, started like the official image (POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB make the cluster (UTF-8) on first start; data in /var/lib/postgresql/data; pg_isready on PATH).
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
# The official image's: a fast shutdown (SIGTERM would wait for every client to leave).
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
