#!/bin/sh
# A software WebGPU adapter for the wgpu backend's tests: Mesa 25 lavapipe (Vulkan on the CPU) from
# bookworm-backports, unpacked privately so no system package changes version (Debian 12's own Mesa 22
# lavapipe works too, but 5-17x slower). Idempotent: a second run only prints the environment line.
#
#   tools/setup_software_vulkan.sh            install (apt needs root or sudo) and print the env line
#   BLAZR_MESA_DIR=dir                        where to unpack (default: $XDG_CACHE_HOME/blazr-mesa-lvp)
#
# Point the Vulkan loader at the private driver with the printed line; tests/conftest.py does that by
# itself when the default directory exists. Debian 12's own libdrm and libLLVM-15 serve the Mesa 25 driver.
set -eu
PRIVDIR=${BLAZR_MESA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/blazr-mesa-lvp}
LIBDIR="$PRIVDIR/root/usr/lib/x86_64-linux-gnu"
ICD="$PRIVDIR/lvp_icd.json"
export DEBIAN_FRONTEND=noninteractive

print_env() {
  echo "export VK_ICD_FILENAMES=$ICD"
}

# Debian's own lavapipe brings libvulkan1 and the driver's runtime deps (libLLVM-15, xcb, wayland).
system_deps_present() {
  [ "$(dpkg-query -W -f='${Status}\n' libvulkan1 mesa-vulkan-drivers 2>/dev/null |
    grep -c " ok installed")" = 2 ]
}

if [ -f "$ICD" ] && [ -f "$LIBDIR/libvulkan_lvp.so" ] && system_deps_present; then
  print_env
  exit 0
fi

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if ! system_deps_present; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends libvulkan1 mesa-vulkan-drivers >/dev/null
fi

# A private apt state (sources, lists, cache) that knows bookworm-backports: the system's apt config is
# left alone. The mirror is the one this machine already uses (deb822 or one-line format).
MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$MIRROR" ] || { echo "no Debian mirror found in the apt sources" >&2; exit 1; }
APT="$PRIVDIR/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$PRIVDIR/debs"
echo "deb $MIRROR bookworm-backports main" >"$APT/sources.list"
APT_OPTS="-o Dir::Etc::SourceList=$APT/sources.list -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists=$APT/lists -o Dir::Cache=$APT/cache -o APT::Sandbox::User=root"
# shellcheck disable=SC2086
apt-get $APT_OPTS update -qq
cd "$PRIVDIR/debs"
rm -f ./*.deb
# shellcheck disable=SC2086
apt-get $APT_OPTS download -qq mesa-vulkan-drivers/bookworm-backports
rm -rf "$PRIVDIR/root"
for deb in ./*.deb; do dpkg-deb -x "$deb" "$PRIVDIR/root"; done
cd - >/dev/null
# The packaged ICD names the library by a system path; ours points at the private copy.
sed "s#\"library_path\": *\"[^\"]*\"#\"library_path\": \"$LIBDIR/libvulkan_lvp.so\"#" \
  "$PRIVDIR/root/usr/share/vulkan/icd.d/lvp_icd.json" >"$ICD.tmp"
mv "$ICD.tmp" "$ICD"
print_env
