// The one way toposched reads untrusted JSON (Kubernetes objects, kube-scheduler's extender
// calls, the partition service's answers): small helpers over simdjson On-Demand that use error
// codes only (nothing may throw; toposched_base sets SIMDJSON_EXCEPTIONS=0 for every user) and
// report failures with the JSON path of the bad value.
#ifndef TOPOSCHED_BASE_JSON_READER_H_
#define TOPOSCHED_BASE_JSON_READER_H_

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "base/result.h"

namespace toposched::json {

namespace ondemand = simdjson::ondemand;

// A JSON path kept on the stack while decoders descend, turned into text only for an error
// message, so the success path allocates nothing for it. A Path must not outlive its parent, and
// its key must stay valid (keys point into the parser's buffer, valid during one parse).
class Path {
 public:
  // The root; `prefix` names it in messages (e.g. "nodes" for a list embedded in a payload).
  explicit Path(std::string_view prefix = {}) : key_(prefix) {}

  Path Field(std::string_view key) const { return Path(this, Kind::kField, key, 0); }
  Path Index(size_t index) const { return Path(this, Kind::kIndex, {}, index); }
  // A key of a string map (labels, annotations, resources): shown as ["key"].
  Path MapKey(std::string_view key) const { return Path(this, Kind::kMapKey, key, 0); }

  std::string ToString() const;

 private:
  enum class Kind { kRoot, kField, kIndex, kMapKey };
  Path(const Path* parent, Kind kind, std::string_view key, size_t index)
      : parent_(parent), kind_(kind), key_(key), index_(index) {}
  void Append(std::string& out) const;

  const Path* parent_ = nullptr;
  Kind kind_ = Kind::kRoot;
  std::string_view key_;
  size_t index_ = 0;
};

// "<path>: <what>"; the root with no prefix is called "document".
Error ErrorAt(const Path& path, std::string_view what);
// A syntax or structure error reported by simdjson while reading the value at `path`.
Error JsonErrorAt(const Path& path, simdjson::error_code code);

Status TypeOf(ondemand::value& value, const Path& path, ondemand::json_type& type);

// Each Read* leaves `out` untouched when the value is null (Kubernetes omits or nulls empty
// fields) and fails on any other type than the expected one.
Status ReadString(ondemand::value& value, const Path& path, std::string& out);
Status ReadBool(ondemand::value& value, const Path& path, bool& out);
Status ReadInt64(ondemand::value& value, const Path& path, int64_t& out);
// Like ReadString, but null is an error too: for our own records, where a missing value means
// the record was damaged.
Status ReadRequiredString(ondemand::value& value, const Path& path, std::string& out);

// Opens an object or array; `present` is false for null.
Status OpenObject(ondemand::value& value, const Path& path, ondemand::object& out, bool& present);
Status OpenArray(ondemand::value& value, const Path& path, ondemand::array& out, bool& present);

// Calls fn(key, value, path_of_value) for each field. Fields the callback does not read are
// skipped by the iterator without being materialised.
template <typename Fn>
Status ForEachField(ondemand::object& object, const Path& path, Fn&& fn) {
  for (auto field_result : object) {
    ondemand::field field;
    if (auto error = std::move(field_result).get(field)) return JsonErrorAt(path, error);
    std::string_view key;
    if (auto error = field.unescaped_key().get(key)) return JsonErrorAt(path, error);
    const Path field_path = path.Field(key);
    Status status = fn(key, field.value(), field_path);
    if (!status.ok()) return status;
  }
  return OkStatus();
}

// Like ForEachField for a string-keyed map: the path of each value is ["key"].
template <typename Fn>
Status ForEachMapEntry(ondemand::object& object, const Path& path, Fn&& fn) {
  for (auto field_result : object) {
    ondemand::field field;
    if (auto error = std::move(field_result).get(field)) return JsonErrorAt(path, error);
    std::string_view key;
    if (auto error = field.unescaped_key().get(key)) return JsonErrorAt(path, error);
    const Path entry_path = path.MapKey(key);
    Status status = fn(key, field.value(), entry_path);
    if (!status.ok()) return status;
  }
  return OkStatus();
}

// Calls fn(index, value, path_of_element) for each element.
template <typename Fn>
Status ForEachElement(ondemand::array& array, const Path& path, Fn&& fn) {
  size_t index = 0;
  for (auto element_result : array) {
    ondemand::value element;
    if (auto error = std::move(element_result).get(element)) {
      return JsonErrorAt(path.Index(index), error);
    }
    const Path element_path = path.Index(index);
    Status status = fn(index, element, element_path);
    if (!status.ok()) return status;
    ++index;
  }
  return OkStatus();
}

// Open and visit in one step, for optional parts of a document: a null (or absent, when the
// caller never reaches it) object, map or array has nothing to visit.
template <typename Fn>
Status ForEachFieldOf(ondemand::value& value, const Path& path, Fn&& fn) {
  ondemand::object object;
  bool present = false;
  if (Status s = OpenObject(value, path, object, present); !s.ok() || !present) return s;
  return ForEachField(object, path, std::forward<Fn>(fn));
}
// The same for a part that must be there: null is the error "<path>: <if_null>".
template <typename Fn>
Status ForEachFieldOfRequired(ondemand::value& value, const Path& path, std::string_view if_null,
                              Fn&& fn) {
  ondemand::object object;
  bool present = false;
  if (Status s = OpenObject(value, path, object, present); !s.ok()) return s;
  if (!present) return ErrorAt(path, if_null);
  return ForEachField(object, path, std::forward<Fn>(fn));
}
template <typename Fn>
Status ForEachMapEntryOf(ondemand::value& value, const Path& path, Fn&& fn) {
  ondemand::object object;
  bool present = false;
  if (Status s = OpenObject(value, path, object, present); !s.ok() || !present) return s;
  return ForEachMapEntry(object, path, std::forward<Fn>(fn));
}
// An array that must be there: null is "<path>: expected an array".
template <typename Fn>
Status ForEachElementOfRequired(ondemand::value& value, const Path& path, Fn&& fn) {
  ondemand::array array;
  bool present = false;
  if (Status s = OpenArray(value, path, array, present); !s.ok()) return s;
  if (!present) return ErrorAt(path, "expected an array");
  return ForEachElement(array, path, std::forward<Fn>(fn));
}
template <typename Fn>
Status ForEachElementOf(ondemand::value& value, const Path& path, Fn&& fn) {
  ondemand::array array;
  bool present = false;
  if (Status s = OpenArray(value, path, array, present); !s.ok() || !present) return s;
  return ForEachElement(array, path, std::forward<Fn>(fn));
}

// The thread's reusable parser; see DecodeDocument.
ondemand::parser& ThreadParser();
// Frees a parser that grew for an unusually large document.
void TrimThreadParser();
Status CheckDocumentEnd(ondemand::document& document);

// Iterates `json` (a whole document held in padded memory) with this thread's parser, runs
// decode(root_value), then rejects any content after the root value. The parser is reused across
// calls because allocating one for a 20 MB list costs more than decoding it; so `decode` must not
// call DecodeDocument itself.
template <typename Decode>
Status DecodeDocument(simdjson::padded_string_view json, Decode&& decode) {
  Status status = OkStatus();
  ondemand::document document;
  ondemand::value value;
  if (auto error = ThreadParser().iterate(json).get(document)) {
    status = Error{std::string("invalid JSON: ") + simdjson::error_message(error)};
  } else if (auto root_error = document.get_value().get(value)) {
    status = root_error == simdjson::SCALAR_DOCUMENT_AS_VALUE
                 ? ErrorAt(Path(), "expected an object")
                 : JsonErrorAt(Path(), root_error);
  } else {
    status = decode(value);
    if (status.ok()) status = CheckDocumentEnd(document);
  }
  TrimThreadParser();
  return status;
}

}  // namespace toposched::json

#endif  // TOPOSCHED_BASE_JSON_READER_H_
