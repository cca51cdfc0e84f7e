# The documentation check of the consumer project: every ```cpp block of the README and of
# docs/*.md compiles as written against the installed package.
#
# At configure time each ```cpp block becomes one .cpp file in <build>/doc_snippets/, named after
# its markdown file and block number (README_1.cpp, docs_distributed_2.cpp), whose first line is a
# `#line` directive naming the markdown file and the block's first line: a compile error names
# the doc's own line. Each file is compiled as an object library (doc_snippet_<name>; all of
# them: the target doc_snippets) with stoker::stoker's headers plus STOKER_DOC_INCLUDE_DIRS (the
# examples' model headers: "resnet.h", "gpt_model.h", "llama_model.h"). Nothing is linked or run: the snippets open
# datasets and GPUs. Editing a markdown file, or adding one to the docs folder, re-runs the
# extraction at the next build.
#
# A block is a fence line "```cpp" (the first word of the info string is exactly cpp; "```text",
# "```cpp-fragment" ... are left out) up to the next line of only "```"; fences are read in order,
# so a "```cpp" line inside another block is not one.

set(STOKER_DOC_README "${CMAKE_CURRENT_SOURCE_DIR}/../../README.md"
    CACHE FILEPATH "Markdown file whose ```cpp blocks must compile (empty: none)")
set(STOKER_DOC_DIR "${CMAKE_CURRENT_SOURCE_DIR}/../../docs"
    CACHE PATH "Folder whose *.md files' ```cpp blocks must compile (empty: none)")
set(STOKER_DOC_INCLUDE_DIRS
    "${CMAKE_CURRENT_SOURCE_DIR}/../../examples/classifier;${CMAKE_CURRENT_SOURCE_DIR}/../../examples/gpt;${CMAKE_CURRENT_SOURCE_DIR}/../../examples/llm"
    CACHE STRING "Extra include folders of the snippets (the examples' resnet.h, gpt_model.h, llama_model.h)")

set(_doc_out "${CMAKE_CURRENT_BINARY_DIR}/doc_snippets")
file(MAKE_DIRECTORY "${_doc_out}")

# Number of "\n" in `text`, into `out`.
function(_stoker_count_newlines text out)
  string(REGEX MATCHALL "\n" nl "${text}")
  list(LENGTH nl n)
  set(${out} ${n} PARENT_SCOPE)
endfunction()

# Writes the ```cpp blocks of `md` as <_doc_out>/<name>_<k>.cpp; appends their paths to `out_var`.
function(stoker_extract_doc_snippets md name out_var)
  file(READ "${md}" content)
  # A leading "\n" puts every fence line after a newline, a trailing one ends the last line.
  # Invariant: the line that follows rest's first character (a "\n") is line base + 1 of `md`.
  set(rest "\n${content}\n")
  set(base 0)
  set(block 0)
  set(written "")
  while(TRUE)
    string(REGEX MATCH "\n *```[^\n]*" fence "${rest}")  # the next opening fence line
    if(fence STREQUAL "")
      break()
    endif()
    string(FIND "${rest}" "${fence}" pos)
    string(SUBSTRING "${rest}" 0 ${pos} head)
    _stoker_count_newlines("${head}" n)
    math(EXPR fence_line "${base} + ${n} + 1")
    string(LENGTH "${fence}" len)
    math(EXPR cut "${pos} + ${len}")
    string(SUBSTRING "${rest}" ${cut} -1 rest)  # starts with the "\n" ending the fence line
    set(base ${fence_line})

    string(REGEX REPLACE "^\n *```[ \t]*" "" info "${fence}")
    string(REGEX REPLACE "[ \t].*$" "" lang "${info}")

    string(REGEX MATCH "\n *```[ \t]*\n" close "${rest}")  # its closing fence line
    if(close STREQUAL "")
      message(FATAL_ERROR "${md}:${fence_line}: the code block opened here is never closed")
    endif()
    string(FIND "${rest}" "${close}" cpos)

    if(lang STREQUAL "cpp")
      math(EXPR block "${block} + 1")
      set(code "")
      if(cpos GREATER 0)
        math(EXPR code_len "${cpos} - 1")
        string(SUBSTRING "${rest}" 1 ${code_len} code)
      endif()
      math(EXPR first_line "${fence_line} + 1")
      set(file "${_doc_out}/${name}_${block}.cpp")
      file(WRITE "${file}.tmp"
           "// Generated from ${md} (```cpp block ${block}, line ${fence_line}) by\n"
           "// tests/consumer/DocSnippets.cmake: edit the markdown, not this file.\n"
           "#line ${first_line} \"${md}\"\n"
           "${code}\n")
      file(COPY_FILE "${file}.tmp" "${file}" ONLY_IF_DIFFERENT)  # unchanged: not rebuilt
      file(REMOVE "${file}.tmp")
      list(APPEND written "${file}")
    endif()

    # Continue at the "\n" that ends the closing fence line.
    string(LENGTH "${close}" clen)
    math(EXPR cut "${cpos} + ${clen} - 1")
    string(SUBSTRING "${rest}" 0 ${cut} head)
    _stoker_count_newlines("${head}" n)
    math(EXPR base "${base} + ${n}")
    string(SUBSTRING "${rest}" ${cut} -1 rest)
  endwhile()
  set(${out_var} ${${out_var}} ${written} PARENT_SCOPE)
endfunction()

# The markdown files: the README, then docs/*.md in name order.
set(_doc_files "")
if(NOT STOKER_DOC_README STREQUAL "")
  file(REAL_PATH "${STOKER_DOC_README}" _readme)
  if(NOT EXISTS "${_readme}")
    message(FATAL_ERROR "STOKER_DOC_README: ${_readme} does not exist")
  endif()
  list(APPEND _doc_files "${_readme}")
endif()
if(NOT STOKER_DOC_DIR STREQUAL "")
  file(REAL_PATH "${STOKER_DOC_DIR}" _docs)
  if(NOT IS_DIRECTORY "${_docs}")
    message(FATAL_ERROR "STOKER_DOC_DIR: ${_docs} is not a folder")
  endif()
  # CONFIGURE_DEPENDS: a markdown file added to or removed from the folder re-runs CMake.
  file(GLOB _docs_md LIST_DIRECTORIES false CONFIGURE_DEPENDS "${_docs}/*.md")
  list(SORT _docs_md)
  list(APPEND _doc_files ${_docs_md})
endif()

set(_doc_sources "")
foreach(md IN LISTS _doc_files)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${md}")
  get_filename_component(_stem "${md}" NAME_WE)
  if(DEFINED _docs)
    get_filename_component(_dir "${md}" DIRECTORY)
    if(_dir STREQUAL _docs)
      set(_stem "docs_${_stem}")  # docs/README.md is not the README
    endif()
  endif()
  string(MAKE_C_IDENTIFIER "${_stem}" _stem)
  stoker_extract_doc_snippets("${md}" "${_stem}" _doc_sources)
endforeach()

# Files of blocks that no longer exist would otherwise linger in the folder.
file(GLOB _stale "${_doc_out}/*.cpp")
foreach(f IN LISTS _stale)
  if(NOT f IN_LIST _doc_sources)
    file(REMOVE "${f}")
  endif()
endforeach()

list(LENGTH _doc_files _nfiles)
list(LENGTH _doc_sources _nsnippets)
if(_nfiles GREATER 0 AND _nsnippets EQUAL 0)
  message(FATAL_ERROR "No ```cpp block in ${_doc_files}: wrong STOKER_DOC_README / STOKER_DOC_DIR?")
endif()
message(STATUS "Doc snippets: ${_nsnippets} ```cpp blocks of ${_nfiles} markdown files, in ${_doc_out}")

add_custom_target(doc_snippets)
foreach(src IN LISTS _doc_sources)
  get_filename_component(_name "${src}" NAME_WE)
  add_library(doc_snippet_${_name} OBJECT "${src}")
  target_link_libraries(doc_snippet_${_name} PRIVATE stoker::stoker)  # headers, defines, C++20
  target_include_directories(doc_snippet_${_name} PRIVATE ${STOKER_DOC_INCLUDE_DIRS})
  add_dependencies(doc_snippets doc_snippet_${_name})
endforeach()
