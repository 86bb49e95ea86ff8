# scripts/gpu-check's step 0, the environment report, and the helpers that find the CUDA
# libraries (sourced by scripts/gpu-check; uses its begin/end and sets cuda_dirs).
# shellcheck shell=bash disable=SC2034,SC2154  # repo comes from scripts/gpu-check, cuda_dirs goes to it

# ---- 0: environment -------------------------------------------------------------------------
# The nvidia/ folders of every python3 on the PATH, one "folder python" line each.
python_nvidia_dirs() {
  local py
  for py in $(python3s); do
    timeout 20 "$py" -c 'import os, sys
for p in sys.path:
    d = os.path.join(p, "nvidia")
    if p and os.path.isdir(d): print(os.path.realpath(d))' 2>/dev/null | sed "s|\$| $py|"
  done | awk '!seen[$1]++'
}

# "folder where" for the system's folders, then each python3's wheels' nvidia/*/{include,lib}.
search_dirs() {
  local nvcc_dir dir py sub
  nvcc_dir=$(dirname "$(readlink -f "$(command -v nvcc 2>/dev/null || echo /nonexistent/x)")")
  for dir in /usr/local/cuda/include /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/include /usr/local/lib \
             /usr/include /usr/include/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib \
             "$nvcc_dir/../include" "$nvcc_dir/../lib64" "$nvcc_dir/../lib" ${CUDA_HOME:+"$CUDA_HOME/include" "$CUDA_HOME/lib64"}; do
    echo "$dir system"
  done
  # Asked once: every python3 starts for it.
  [[ -n ${nvidia_dirs+set} ]] || nvidia_dirs=$(python_nvidia_dirs)
  [[ -n $nvidia_dirs ]] && while read -r dir py; do
    for sub in "$dir"/*/include "$dir"/*/lib; do echo "$sub $py"; done
  done <<<"$nvidia_dirs"
}

# "label: folder [names] (where); ..." for the files matching a pattern in search_dirs.
locate() {
  local label=$1 re=$2 dir real names n where
  local -A seen=()
  local -a hits=()
  while read -r dir where; do
    [[ -d $dir ]] || continue
    real=$(readlink -f "$dir")
    [[ -n ${seen[$real]:-} ]] && continue
    seen[$real]=1
    names=$(ls -1 "$real" 2>/dev/null | grep -E "$re")
    [[ -n $names ]] || continue
    n=$(wc -l <<<"$names")
    names=$(head -n 2 <<<"$names" | tr '\n' ' ')
    ((n > 2)) && names+="+$((n - 2)) "
    hits+=("$real [${names% }] ($where)")
  done < <(search_dirs)
  if ((${#hits[@]})); then
    printf '  %-10s %s\n' "$label" "${hits[0]}"
    printf '  %-10s %s\n' "" "${hits[@]:1}"
  else
    printf '  %-10s %s\n' "$label" "not found"
  fi | sed '/^ *$/d'
}

# "label: X.Y.Z (header)" for each copy of a header in search_dirs, from its PREFIX_MAJOR, _MINOR
# and _PATCHLEVEL (cuDNN) or _PATCH (NCCL) macros.
header_versions() {
  local label=$1 header=$2 prefix=$3 dir where file version
  local -A seen=()
  while read -r dir where; do
    file=$(readlink -f "$dir/$header" 2>/dev/null) || continue
    [[ -f $file && -z ${seen[$file]:-} ]] || continue
    seen[$file]=1
    version=$(awk -v p="$prefix" '$1 == "#define" && $2 ~ "^" p "_(MAJOR|MINOR|PATCH|PATCHLEVEL)$" && !($2 in v) {
                v[$2] = $3; order[n++] = $3 } END { for (i = 0; i < n; i++) printf "%s%s", (i ? "." : ""), order[i] }' "$file")
    printf '  %-10s %s (%s, %s)\n' "$label" "${version:-unknown}" "$file" "$where"
  done < <(search_dirs)
}

# Each python3 on the PATH once (by the file it resolves to).
python3s() {
  local entry
  local -a entries
  IFS=: read -ra entries <<<"$PATH"
  for entry in "${entries[@]}"; do
    [[ -n $entry && -x $entry/python3 && ! -d $entry/python3 ]] || continue
    echo "$(readlink -f "$entry/python3") $entry/python3"
  done | awk '!seen[$1]++ {print $2}'
}

# The NVIDIA wheels of each python3, "name version" as `pip show` gives them (from the same
# metadata, without pip's start-up).
nvidia_wheels() {
  local py wheels
  for py in $(python3s); do
    wheels=$(timeout 60 "$py" -c 'import importlib.metadata as m
print(", ".join(sorted({f"{d.metadata['"'"'Name'"'"']} {d.version}" for d in m.distributions()
                        if (d.metadata["Name"] or "").lower().startswith("nvidia-")})))' 2>/dev/null)
    echo "  wheels     $py: ${wheels:-no nvidia-* wheels}"
  done
}

# The folders holding libcudnn and libcublas, for LD_LIBRARY_PATH when the prebuilt binaries run
# (their rpath names none: where a machine keeps cuDNN is not known when they are built).
cuda_library_path() {
  local dir py lib
  local -a dirs=()
  for lib in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    compgen -G "$lib/libcu[db]*.so.*" >/dev/null && dirs+=("$lib")
  done
  while read -r dir py; do
    for lib in "$dir"/cudnn/lib "$dir"/cu13/lib "$dir"/cublas/lib "$dir"/nccl/lib; do
      [[ -d $lib ]] && dirs+=("$lib")
    done
  done < <(python_nvidia_dirs)
  local IFS=:
  echo "${dirs[*]}"
}

runtime_of_kernel() {
  case "$1" in
    4.4.0*) echo "gVisor (its kernel reports 4.4.0): compute-sanitizer has refused the device there" ;;
    *-fc-*|*firecracker*) echo "Firecracker microVM: compute-sanitizer has worked there" ;;
    *) echo "not recognised" ;;
  esac
}

smi() {
  local answer
  answer=$(timeout 30 nvidia-smi --query-gpu="$1" --format=csv,noheader 2>/dev/null | head -n 1)
  echo "${answer:-none (nvidia-smi: no GPU or no driver)}"
}

step_environment() {
  begin 0-environment "what this machine is"
  local kernel glibc
  kernel=$(uname -r)
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2)
  echo "  GPU        $(smi name,memory.total,compute_cap)"
  echo "  driver     $(smi driver_version), $(timeout 30 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' || echo 'CUDA Version: unknown')"
  echo "  nvcc       $(command -v nvcc || echo 'not on PATH') $(nvcc --version 2>/dev/null | grep -o 'release [^,]*, V[0-9.]*' || true)"
  echo "  kernel     $kernel: $(runtime_of_kernel "$kernel")"
  echo "  glibc      $glibc; $(nproc) cores; cmake $(cmake --version 2>/dev/null | head -n 1 | awk '{print $3}'), ninja $(ninja --version 2>/dev/null || echo none)"
  echo "  sanitizer  $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo 'not found')"
  local py
  for py in $(python3s); do
    echo "  python3    $py: $(timeout 60 "$py" -c 'import sys; print("Python", sys.version.split()[0], end="")
try:
    import torch; print(", torch", torch.__version__, "cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "not available", end="")
except Exception as e: print(", no torch:", type(e).__name__, end="")' 2>/dev/null)"
  done
  locate cudnn.h '^cudnn\.h$'
  locate libcudnn '^libcudnn\.so'
  locate nccl.h '^nccl\.h$'
  locate libnccl '^libnccl\.so'
  locate libcublas '^libcublas\.so'
  header_versions cuDNN cudnn_version.h CUDNN
  header_versions NCCL nccl.h NCCL
  nvidia_wheels
  if [[ -f $repo/.gpu-bundle/MANIFEST ]]; then
    echo "  bundle     $(head -n 1 "$repo/.gpu-bundle/MANIFEST")"
    sed -n 's/^prebuilt \(NCCL\|cuDNN\): /  prebuilt   \1 /p' "$repo/.gpu-bundle/MANIFEST"
    local need
    need=$(sed -n 's/^prebuilt needs: glibc >= \([0-9.]*\).*/\1/p' "$repo/.gpu-bundle/MANIFEST")
    if [[ -n $need ]]; then
      if [[ $(printf '%s\n' "$need" "$glibc" | sort -V | head -n 1) == "$need" ]]; then
        echo "  prebuilt   needs glibc >= $need: this machine's $glibc will do"
      else
        echo "  prebuilt   needs glibc >= $need: this machine's $glibc is older, they will not start"
      fi
    fi
  else
    echo "  bundle     none (.gpu-bundle/MANIFEST missing: run scripts/gpu-bundle --prebuilt and carry .gpu-bundle)"
  fi
  cuda_dirs=$(cuda_library_path)
  if ! command -v nvcc >/dev/null; then
    # A toolkit that came as wheels (nvidia-cuda-nvcc) keeps nvcc in site-packages/nvidia/cu13/bin.
    local dir py
    while read -r dir py; do
      if [[ -x $dir/cu13/bin/nvcc ]]; then
        export PATH="$dir/cu13/bin:$PATH" CUDACXX="$dir/cu13/bin/nvcc"
        echo "  nvcc       none on the PATH: using $CUDACXX (from $py's wheels)"
        break
      fi
    done < <(python_nvidia_dirs)
  fi
  end "ok ($(smi name), kernel $kernel, glibc $glibc)"
}
