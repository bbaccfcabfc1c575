// Text files read as a stream of documents, in constant memory, for tokenizer training and
// `dtrain data prepare`.
//
// Files are read in blocks of block_bytes. A document never spans two files; within a file
// the separator decides where documents end:
//   blank_lines  a document is a run of lines ended by an empty line ("\n\n") or the end of
//                the file; its text excludes the newlines that separate it from the next
//   line         each line is a document, without its "\n"; empty lines are skipped
//   file         each file is one document, byte for byte
// A document longer than max_piece_bytes comes out in pieces, cut where the pre-tokenizer
// cuts anyway (is_safe_cut in data/pretokenizer.h) so that encoding the pieces gives the
// tokens of the whole; only text with no such place for max_piece_bytes (one giant word) is
// cut elsewhere, at a UTF-8 character boundary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace dt {

enum class DocSeparator { blank_lines, line, file };
// "blank-lines", "line" or "file"; throws dt::Error listing them for anything else.
DocSeparator parse_doc_separator(std::string_view name);

struct DocumentPiece {
  std::string text;
  bool starts_document = true;  // false: it continues the previous piece's document
};

class DocumentReader {
 public:
  // Checks every file up front: throws dt::Error naming a file that is missing, unreadable or
  // empty. max_piece_bytes defaults to 4 * block_bytes.
  DocumentReader(std::vector<std::filesystem::path> files, DocSeparator separator, size_t block_bytes = size_t{1} << 20,
                 size_t max_piece_bytes = 0);

  // The next document or piece of one; false when every file is read.
  bool next(DocumentPiece& piece);

  int64_t bytes_read() const { return bytes_read_; }
  // Input bytes handed out or skipped so far: where the next piece starts, give or take the
  // newlines before it. Unlike bytes_read(), it does not depend on block_bytes.
  int64_t bytes_consumed() const { return bytes_read_ - static_cast<int64_t>(buffer_.size() - head_); }
  int64_t total_bytes() const { return total_bytes_; }

 private:
  bool fill();  // reads a block of the current file into the buffer; false at its end
  std::string_view pending() const { return std::string_view(buffer_).substr(head_); }
  void emit(DocumentPiece& piece, size_t bytes, size_t consumed, bool document_ends);

  std::vector<std::filesystem::path> files_;
  DocSeparator separator_;
  size_t block_bytes_, max_piece_bytes_;
  size_t file_index_ = 0;
  std::ifstream in_;
  bool file_open_ = false;
  std::string buffer_;  // bytes read and not yet handed out start at head_
  size_t head_ = 0;
  bool inside_document_ = false;  // the last piece did not end its document
  int64_t bytes_read_ = 0, total_bytes_ = 0;
};

}  // namespace dt
