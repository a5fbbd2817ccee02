#!/usr/bin/env bash
# Make sure a Vulkan driver is present so the WebGPU backend has an adapter.
# On Debian without a GPU this is Mesa's lavapipe (mesa-vulkan-drivers).
set -u
if ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1 || ls /etc/vulkan/icd.d/*.json >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing mesa-vulkan-drivers (lavapipe) for the GPU backend"
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q mesa-vulkan-drivers >/dev/null
else
  echo "warning: no Vulkan driver found; install mesa-vulkan-drivers for the GPU backend" >&2
fi
exit 0
