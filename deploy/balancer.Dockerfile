# The load balancer of the scale-out profile of docker-compose.yml (issue #4): nginx from
# Debian's package on the same base as the fedldp image (no registry needed), round-robin over
# the server replicas named in deploy/nginx.conf. Build context: deploy/.
#   docker build -f deploy/balancer.Dockerfile -t fedldp-balancer deploy

FROM python:3.11-slim
RUN set -eu; apt-get update -qq; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /etc/nginx/sites-enabled/* /etc/nginx/conf.d/*
COPY nginx.conf /etc/nginx/nginx.conf
# Check the configuration now, with the replicas' names (which resolve only inside the compose
# network) replaced by an address.
RUN sed -E 's/^( *server +)[A-Za-z0-9.-]+:/\1127.0.0.1:/' /etc/nginx/nginx.conf > /tmp/check.conf \
    && nginx -q -t -c /tmp/check.conf && rm /tmp/check.conf
EXPOSE 80
STOPSIGNAL SIGQUIT
# Healthy when a request goes through to a replica (python: the real python:3.11-slim has no curl).
HEALTHCHECK --interval=2s --timeout=5s --start-period=5s --retries=30 CMD \
    ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1/health', timeout=4)"]
CMD ["nginx", "-g", "daemon off;"]
