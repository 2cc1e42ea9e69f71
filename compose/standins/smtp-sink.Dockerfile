# Stand-in for Mailpit (make compose-check only): an aiosmtpd sink that keeps every
# message and lists them on the part of Mailpit's HTTP API the check reads.
ARG BASE
FROM ${BASE}
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       python3-aiosmtpd \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10002 sink
COPY smtp_sink.py /usr/local/bin/smtp-sink
USER sink
CMD ["python3", "/usr/local/bin/smtp-sink"]
