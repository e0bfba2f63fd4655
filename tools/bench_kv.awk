# Helpers the make-bench scripts (tools/bench*.sh) share in their awk summaries: each script
# prepends this file's text to its own program (awk "$kv_awk"'...').
# kv(line, key): the value of key=value in a `result ...` line ("" when absent).
function kv(line, key,   n, i, a, f) {
  n = split(line, f, " ")
  for (i = 1; i <= n; i++) { split(f[i], a, "="); if (a[1] == key) return a[2] }
  return ""
}
# median(arr, n): the median of arr[1..n] (sorts arr in place).
function median(arr, n,   i, j, t) {
  for (i = 2; i <= n; i++)
    for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
  return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
