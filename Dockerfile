# One image for the API and the workers: Python, the C compiler the CPU backend needs, and the project.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev libgomp1 curl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY linearizer linearizer
COPY devices devices
COPY search search
COPY workers workers
COPY tunesvc tunesvc
RUN pip install --no-cache-dir ".[cuda]"  # NVRTC and the CUDA headers, for the CUDA worker (the driver comes with the GPU)
ENV TUNESVC_CACHE_DIR=/var/cache/tunesvc
EXPOSE 8000
CMD ["tunesvc", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "0"]
