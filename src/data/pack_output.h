// Private: where `stoker pack` may write its database. The pack replaces what is at --out only
// at its very end, so the rules are checked before any work: --out must not be an input, lie
// inside one or contain one (`stoker pack photos --out photos --overwrite` would delete the
// photos), and --overwrite replaces only a database that `stoker pack` wrote (a folder holding
// data.mdb and lock.mdb and nothing else, whose metadata says it is one), never another folder
// or file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace stoker::data::detail {

// One input of a pack and what it is, for the error ("the input folder", "the list file", "the
// folder of the input image"). `may_hold_output`: --out may lie inside it (the folder of an image
// named by a list file: a database written there never becomes an input, and is never one of the
// images).
struct PackInput {
  std::filesystem::path path;
  std::string what;
  bool may_hold_output = false;
};

// Throws stoker::Error naming --out and the input when `out` is one of `inputs`, lies inside one
// (unless it may hold the output) or contains one. Paths are compared after
// std::filesystem::weakly_canonical (symbolic links and `..` resolved) and by file identity
// (st_dev, st_ino) of every existing ancestor, so that neither a link nor a bind mount hides the
// overlap.
void check_output_apart_from_inputs(const std::filesystem::path& out,
                                    const std::vector<PackInput>& inputs);

// Throws stoker::Error when something is at `out` and it may not be replaced: always without
// `overwrite`; with it, unless it is a stoker database (see above). Nothing at `out`: no error.
void check_output_replaceable(const std::filesystem::path& out, bool overwrite);

// Removes the stoker database at `out` (its data.mdb and lock.mdb, then the empty folder) after
// checking again that it is one; throws stoker::Error, removing nothing, when it is not.
void remove_stoker_database(const std::filesystem::path& out);

}  // namespace stoker::data::detail
