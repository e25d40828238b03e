# PostgreSQL for the scale-out profile of docker-compose.yml (issue #4), from Debian's
# `postgresql` package on the same base as the fedldp image: no registry is needed, only the
# Debian mirror in the base image's apt sources (plain HTTP). Build context: deploy/.
#   docker build -f deploy/postgres.Dockerfile -t fedldp-postgres deploy
# On the first start on an empty data directory (the volume on /var/lib/postgresql/data) the
# entrypoint creates the cluster, the role $POSTGRES_USER with $POSTGRES_PASSWORD (empty: trust
# authentication) and the database $POSTGRES_DB; later starts reuse it.

FROM python:3.11-slim
# Debian creates and starts a cluster on install: drop it (the entrypoint makes its own on the
# volume) and put the server binaries (initdb, postgres, pg_isready) first on the PATH.
RUN set -eu; apt-get update -qq; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; \
    pg_lsclusters -h | while read -r version cluster _; do pg_dropcluster --stop "$version" "$cluster"; done; \
    ln -s /usr/lib/postgresql/*/bin/* /usr/local/bin/; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*; \
    install -d -o postgres -g postgres -m 2775 /var/run/postgresql; \
    install -d -o postgres -g postgres -m 700 /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/fedldp-postgres
RUN chmod 755 /usr/local/bin/fedldp-postgres
ENV PGDATA=/var/lib/postgresql/data POSTGRES_USER=fedldp POSTGRES_DB=fedldp POSTGRES_PASSWORD=
USER postgres
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=2s --timeout=5s --start-period=5s --retries=30 CMD \
    pg_isready --quiet --host 127.0.0.1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB"
ENTRYPOINT ["fedldp-postgres"]
