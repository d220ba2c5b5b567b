#include "base/json_reader.h"

#include <simdjson.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace toposched::json {
namespace {

// A parser that grew past this for one huge document is dropped afterwards, so one odd payload
// does not pin its buffers (several times the document's size) for the thread's lifetime.
constexpr size_t kKeepParserCapacity = size_t{64} << 20;

thread_local std::unique_ptr<ondemand::parser> thread_parser;

std::string_view TypeName(ondemand::json_type type) {
  switch (type) {
    case ondemand::json_type::array:
      return "an array";
    case ondemand::json_type::object:
      return "an object";
    case ondemand::json_type::number:
      return "a number";
    case ondemand::json_type::string:
      return "a string";
    case ondemand::json_type::boolean:
      return "a boolean";
    case ondemand::json_type::null:
      return "null";
  }
  return "an unknown value";
}

Error WrongType(const Path& path, std::string_view expected, ondemand::json_type got) {
  return ErrorAt(path, std::string("expected ") + std::string(expected) + ", got " +
                           std::string(TypeName(got)));
}

}  // namespace

void Path::Append(std::string& out) const {
  if (parent_ != nullptr) parent_->Append(out);
  switch (kind_) {
    case Kind::kRoot:
      out.append(key_);
      break;
    case Kind::kField:
      if (!out.empty()) out += '.';
      out.append(key_);
      break;
    case Kind::kIndex:
      out += '[';
      out += std::to_string(index_);
      out += ']';
      break;
    case Kind::kMapKey:
      out += "[\"";
      out.append(key_);
      out += "\"]";
      break;
  }
}

std::string Path::ToString() const {
  std::string out;
  Append(out);
  return out;
}

Error ErrorAt(const Path& path, std::string_view what) {
  std::string where = path.ToString();
  if (where.empty()) where = "document";
  return Error{where + ": " + std::string(what)};
}

Error JsonErrorAt(const Path& path, simdjson::error_code code) {
  return ErrorAt(path, std::string("invalid JSON: ") + simdjson::error_message(code));
}

Status TypeOf(ondemand::value& value, const Path& path, ondemand::json_type& type) {
  if (auto error = value.type().get(type)) return JsonErrorAt(path, error);
  return OkStatus();
}

Status ReadString(ondemand::value& value, const Path& path, std::string& out) {
  ondemand::json_type type;
  Status status = TypeOf(value, path, type);
  if (!status.ok()) return status;
  if (type == ondemand::json_type::null) return OkStatus();
  if (type != ondemand::json_type::string) return WrongType(path, "a string", type);
  std::string_view text;
  if (auto error = value.get_string().get(text)) return JsonErrorAt(path, error);
  out.assign(text);
  return OkStatus();
}

Status ReadBool(ondemand::value& value, const Path& path, bool& out) {
  ondemand::json_type type;
  Status status = TypeOf(value, path, type);
  if (!status.ok()) return status;
  if (type == ondemand::json_type::null) return OkStatus();
  if (type != ondemand::json_type::boolean) return WrongType(path, "a boolean", type);
  if (auto error = value.get_bool().get(out)) return JsonErrorAt(path, error);
  return OkStatus();
}

Status ReadRequiredString(ondemand::value& value, const Path& path, std::string& out) {
  ondemand::json_type type;
  if (Status s = TypeOf(value, path, type); !s.ok()) return s;
  if (type != ondemand::json_type::string) return ErrorAt(path, "expected a string");
  return ReadString(value, path, out);
}

Status ReadInt64(ondemand::value& value, const Path& path, int64_t& out) {
  ondemand::json_type type;
  Status status = TypeOf(value, path, type);
  if (!status.ok()) return status;
  if (type == ondemand::json_type::null) return OkStatus();
  if (type != ondemand::json_type::number) return WrongType(path, "an integer", type);
  if (auto error = value.get_int64().get(out)) {
    return ErrorAt(path, std::string("expected an integer: ") + simdjson::error_message(error));
  }
  return OkStatus();
}

Status OpenObject(ondemand::value& value, const Path& path, ondemand::object& out, bool& present) {
  ondemand::json_type type;
  Status status = TypeOf(value, path, type);
  if (!status.ok()) return status;
  present = false;
  if (type == ondemand::json_type::null) return OkStatus();
  if (type != ondemand::json_type::object) return WrongType(path, "an object", type);
  if (auto error = value.get_object().get(out)) return JsonErrorAt(path, error);
  present = true;
  return OkStatus();
}

Status OpenArray(ondemand::value& value, const Path& path, ondemand::array& out, bool& present) {
  ondemand::json_type type;
  Status status = TypeOf(value, path, type);
  if (!status.ok()) return status;
  present = false;
  if (type == ondemand::json_type::null) return OkStatus();
  if (type != ondemand::json_type::array) return WrongType(path, "an array", type);
  if (auto error = value.get_array().get(out)) return JsonErrorAt(path, error);
  present = true;
  return OkStatus();
}

ondemand::parser& ThreadParser() {
  if (thread_parser == nullptr) thread_parser = std::make_unique<ondemand::parser>();
  return *thread_parser;
}

void TrimThreadParser() {
  if (thread_parser != nullptr && thread_parser->capacity() > kKeepParserCapacity) {
    thread_parser.reset();
  }
}

Status CheckDocumentEnd(ondemand::document& document) {
  const char* rest = nullptr;
  const simdjson::error_code error = document.current_location().get(rest);
  if (error == simdjson::OUT_OF_BOUNDS) return OkStatus();
  return Error{"invalid JSON: unexpected content after the top-level value"};
}

}  // namespace toposched::json
