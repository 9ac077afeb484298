# dprobe worker/collector image for docker-compose.yml (CPU only; NVML comes from the
# host driver through the NVIDIA container toolkit when the collector runs on a GPU node).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml requirements.lock README.md ./
COPY dprobe ./dprobe
COPY collectors ./collectors
COPY streams ./streams
COPY models ./models
COPY sinks ./sinks
COPY traces ./traces
COPY sim ./sim
COPY infra ./infra
RUN pip install --no-cache-dir -c requirements.lock '.[all]'
ENTRYPOINT ["dprobe"]
