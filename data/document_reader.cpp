#include "data/document_reader.h"

#include <algorithm>

#include "core/error.h"
#include "data/pretokenizer.h"

namespace dt {

DocSeparator parse_doc_separator(std::string_view name) {
  if (name == "blank-lines") return DocSeparator::blank_lines;
  if (name == "line") return DocSeparator::line;
  if (name == "file") return DocSeparator::file;
  throw Error(str("unknown document separator '", name, "'; valid separators are blank-lines, line, file"));
}

DocumentReader::DocumentReader(std::vector<std::filesystem::path> files, DocSeparator separator, size_t block_bytes,
                               size_t max_piece_bytes)
    : files_(std::move(files)),
      separator_(separator),
      block_bytes_(std::max<size_t>(block_bytes, 16)),
      max_piece_bytes_(max_piece_bytes > 0 ? max_piece_bytes : 4 * block_bytes_) {
  if (files_.empty()) throw Error("no input text files given; name one or more files after the flags");
  for (const auto& file : files_) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(file, ec);
    if (ec) throw Error(str("cannot read input text file '", file.string(), "': ", ec.message(), "; check the path"));
    if (std::ifstream probe(file, std::ios::binary); !probe)
      throw Error(str("cannot open input text file '", file.string(), "'; check its permissions"));
    if (bytes == 0) throw Error(str("input text file '", file.string(), "' is empty; remove it from the inputs"));
    total_bytes_ += static_cast<int64_t>(bytes);
  }
}

bool DocumentReader::fill() {
  if (!file_open_) return false;
  // Drop what was handed out before growing the buffer, so it stays near max_piece_bytes.
  buffer_.erase(0, head_);
  head_ = 0;
  const size_t old_size = buffer_.size();
  buffer_.resize(old_size + block_bytes_);
  in_.read(buffer_.data() + old_size, static_cast<std::streamsize>(block_bytes_));
  const size_t got = static_cast<size_t>(in_.gcount());
  buffer_.resize(old_size + got);
  bytes_read_ += static_cast<int64_t>(got);
  if (got == 0) {
    if (in_.bad()) throw Error(str("read error in input text file '", files_[file_index_].string(), "'"));
    in_.close();
    file_open_ = false;
    ++file_index_;
  }
  return got > 0;
}

void DocumentReader::emit(DocumentPiece& piece, size_t bytes, size_t consumed, bool document_ends) {
  piece.text.assign(buffer_, head_, bytes);
  piece.starts_document = !inside_document_;
  inside_document_ = !document_ends;
  head_ += consumed;
}

bool DocumentReader::next(DocumentPiece& piece) {
  while (true) {
    if (!file_open_ && pending().empty()) {  // open the next file
      if (file_index_ >= files_.size()) return false;
      in_.open(files_[file_index_], std::ios::binary);
      if (!in_) throw Error(str("cannot open input text file '", files_[file_index_].string(), "'"));
      file_open_ = true;
      inside_document_ = false;
    }
    if (separator_ != DocSeparator::file) {
      // Skip the newlines before a document, then look for its end.
      if (!inside_document_) head_ += std::min(pending().find_first_not_of('\n'), pending().size());
      const std::string_view end_marker = separator_ == DocSeparator::line ? "\n" : "\n\n";
      if (const size_t end = pending().find(end_marker); end != std::string_view::npos && end <= max_piece_bytes_) {
        if (end == 0) {  // an empty document; with pieces it can only be the end of a long one
          head_ += end_marker.size();
          inside_document_ = false;
          continue;
        }
        emit(piece, end, end + end_marker.size(), true);
        return true;
      }
    }
    if (pending().size() < max_piece_bytes_ && fill()) continue;
    if (file_open_ && pending().size() >= max_piece_bytes_) {  // a long document: cut a piece
      const std::string_view text = pending();
      size_t cut = max_piece_bytes_;
      while (cut > 0 && !is_safe_cut(text, cut)) --cut;
      if (cut == 0) {  // no safe place: cut before a UTF-8 lead byte
        cut = max_piece_bytes_;
        while (cut > 1 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
      }
      emit(piece, cut, cut, false);
      return true;
    }
    // The end of the file ends the document; a trailing separator is not part of it.
    size_t bytes = pending().size();
    if (separator_ != DocSeparator::file)
      while (bytes > 0 && pending()[bytes - 1] == '\n') --bytes;
    const size_t consumed = pending().size();
    if (bytes == 0) {
      head_ += consumed;
      inside_document_ = false;
      continue;
    }
    emit(piece, bytes, consumed, true);
    return true;
  }
}

}  // namespace dt
