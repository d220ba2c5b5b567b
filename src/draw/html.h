// Text made safe for HTML and SVG (element content and quoted attribute values).
#ifndef TOPOSCHED_DRAW_HTML_H_
#define TOPOSCHED_DRAW_HTML_H_

#include <string>
#include <string_view>

namespace toposched::draw {

std::string HtmlEscape(std::string_view s);

}  // namespace toposched::draw

#endif  // TOPOSCHED_DRAW_HTML_H_
