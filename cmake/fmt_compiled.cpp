// fmt's compiled part for a KAPITSA_OPS_ONLY build (cmake/ops_only.cmake), made from the host's fmt
// headers (Debian's libfmt-dev) for whatever the target is: the out-of-line functions of
// fmt/format-inl.h, and the two templates fmt/format.h declares `extern` for char. Compiling this once
// instead of FMT_HEADER_ONLY in every file took ~4 s of compile time per file off the AArch64 build.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
}  // namespace detail
FMT_END_NAMESPACE
