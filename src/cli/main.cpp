// `stoker`: the command-line tool. Subcommands:
//   stoker pack SOURCE --out DIR [--threads N] [--resize N] [--quality Q] [--shuffle --seed S]
//       [--no-restart-markers] [--max-pixels N] [--classes N] [--apply-exif-orientation]
//       SOURCE is a folder of class sub-folders or a list file of `path label` lines. SIGINT or
//       SIGTERM stops it with nothing written and exit status 130 / 143.
//   stoker pack synth --out DIR [--samples N] [--classes C] [--size S] [--seed X]
//       the synthetic shapes dataset (--as-folder writes JPEG files in class folders instead).
//   stoker pack-text INPUT... --out DIR (--tokenizer FILE.model | --train-tokenizer
//       --vocab-size N): text / JSON Lines tokenized with SentencePiece into Megatron's indexed
//       dataset (pack_text.h); interrupted like `stoker pack`.
//   stoker info DIR [--verify]
//   stoker info TOKENS [--verify] [--vocab N] [--token-bytes 2|4] [--eot ID]
//       a Megatron dataset (PREFIX, .idx or .bin), llm.c shards (a shard or a quoted glob) or raw
//       token ids: tokens, documents, dtype, ids; every id checked below --vocab (info_tokens.h).
//   stoker info FILE.safetensors [--verify]
//       a training checkpoint (position, run, tensors, checksums) or a weights file; --verify
//       reads every tensor against its checksum (info_safetensors.h).
//       what a packed database holds; reads every record's header (--verify: every byte:
//       checksums, JPEG headers) and lists the bad ones (exit status 1 when there are any).
//   stoker launch --nproc-per-node N PROGRAM ARGS...
//       runs PROGRAM once per GPU of this node with torchrun's environment (RANK, WORLD_SIZE,
//       LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); stops every rank when one
//       fails and exits with the failing rank's status (docs/distributed.md).
//   stoker doctor [--data DB] [--sweep 64,128] [--gpus N] [--overhead] [-- PROGRAM ARGS...]
//       static checks of the machine, then why training is slow: real vs synthetic data, a
//       batch-size sweep, 1 vs N GPUs (docs/diagnostics.md).
// Errors print "stoker: error: MESSAGE" and "  hint: HINT" and exit with status 1; malformed
// arguments and an unknown subcommand get CLI11's message and exit code (109 for the latter).
#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "data/dataset_scan.h"
#include "stoker/core/device.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "stoker/data/lmdb_dataset.h"
#include "stoker/data/pack.h"
#include "stoker/dist/launcher.h"

#include "doctor/doctor.h"
#include "info_safetensors.h"
#include "info_tokens.h"
#include "pack_text.h"

namespace {

namespace fs = std::filesystem;
using stoker::data::PackOptions;

void add_pack_options(CLI::App* app, PackOptions& o) {
  app->add_option("-j,--threads", o.threads, "worker threads (0: all cores)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app->add_option("--map-size", o.map_size_gib, "LMDB map size in GiB (address space)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app->add_flag("--overwrite", o.overwrite, "replace an existing database at --out");
  app->add_flag("!--no-progress", o.progress, "no progress bar");
  app->add_flag("!--no-restart-markers", o.restart_markers,
                "store each JPEG's bytes as given (default: rewritten losslessly with restart "
                "markers, so a random crop decodes only the tiles it covers)");
}

// `stoker info DB [--verify]`: the metadata, then every record read (headers and lengths; with
// --verify also record checksums and JPEG headers). Exit status 1 when any record is bad.
int run_info(const fs::path& path, bool verify) {
  namespace data = stoker::data;
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec)) {
    // Neither a safetensors file nor a token corpus (dispatched before): say what it is instead
    // of "not an LMDB folder"; a FIFO or device is named without being opened.
    stoker::core::check_input_file(path, "stoker info");
    stoker::core::detail::throw_error(
        __FILE__, __LINE__,
        fmt::format("{} is a file stoker info does not recognise: not a database folder, a "
                    "safetensors file or a token corpus",
                    path.string()),
        "give a folder written by `stoker pack`, a .safetensors checkpoint or weights file, a "
        "Megatron .idx/.bin prefix, llm.c shards, or raw token ids with --token-bytes 2|4");
  }
  const data::LmdbImageDataset ds(path);
  std::printf("%s: %lld samples, %d classes\n", path.string().c_str(),
              static_cast<long long>(ds.size()), ds.num_classes());
  for (int c = 0; c < ds.num_classes(); ++c) {
    std::printf("  %3d  %s\n", c, ds.class_names()[static_cast<size_t>(c)].c_str());
  }
  std::fflush(stdout);  // before the progress bar on stderr
  const data::DatasetScan scan = data::scan_dataset(ds, {.verify = verify, .progress = true});
  std::string versions;
  for (const auto& [version, count] : scan.versions) {
    versions +=
        fmt::format("{}{} of version {}{}", versions.empty() ? "" : ", ", count, version,
                    version == data::kRecordVersionV1 ? " (no checksum)" : " (record checksum)");
  }
  std::printf("records: %s\n", versions.empty() ? "none readable" : versions.c_str());
  std::printf("payload: %llu bytes (%.2f MiB); data.mdb: %llu bytes (%.2f MiB)\n",
              static_cast<unsigned long long>(scan.payload_bytes),
              static_cast<double>(scan.payload_bytes) / 1048576.0,
              static_cast<unsigned long long>(ds.file_bytes()),
              static_cast<double>(ds.file_bytes()) / 1048576.0);
  std::printf("%s %lld records (%s): %lld bad\n", verify ? "verified" : "checked",
              static_cast<long long>(scan.records),
              verify ? "headers, lengths, record checksums, JPEG headers"
                     : "headers and lengths; --verify also checks record checksums and JPEG "
                       "headers",
              static_cast<long long>(scan.bad));
  if (scan.bad == 0) return 0;
  std::printf("bad records:\n");
  for (const data::BadRecord& bad : scan.listed) {
    std::printf("  %s: %s\n", bad.key.c_str(), bad.reason.c_str());
  }
  if (scan.bad > static_cast<int64_t>(scan.listed.size())) {
    std::printf("  and %lld more\n",
                static_cast<long long>(scan.bad - static_cast<int64_t>(scan.listed.size())));
  }
  std::fflush(stdout);
  std::fprintf(stderr,
               "stoker: error: %lld of %lld records of %s are bad\n  hint: copy the database "
               "again or re-pack it (`stoker pack ...`); training can skip bad records with "
               "`--on-corrupt skip`\n",
               static_cast<long long>(scan.bad), static_cast<long long>(scan.records),
               path.string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stoker: training runtime tools"};
  app.require_subcommand(1);

  PackOptions pack;
  std::string source, out;
  CLI::App* pack_cmd = app.add_subcommand(
      "pack",
      "pack JPEGs (folder of class sub-folders, or list file of `path label` lines) "
      "into an LMDB dataset");
  pack_cmd->add_option("source", source, "folder of class sub-folders, or list file");
  pack_cmd->add_option("-o,--out", out, "output database folder");
  add_pack_options(pack_cmd, pack);
  pack_cmd
      ->add_option("--resize", pack.resize_shorter,
                   "re-encode so the shorter side is at most N pixels (0: keep the files)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  pack_cmd
      ->add_option("--max-pixels", pack.max_pixels,
                   "skip images whose header claims more pixels (width x height; the loader's "
                   "budget)")
      ->check(CLI::Range(int64_t{1}, int64_t{65535} * 65535))
      ->capture_default_str();
  pack_cmd
      ->add_option("--classes", pack.classes,
                   "list files: the number of classes (a label >= N is an error); 0: max label "
                   "+ 1, checked for sparse labels")
      ->check(CLI::Range(int64_t{0}, stoker::data::kPackMaxClasses))
      ->capture_default_str();
  pack_cmd->add_flag("--apply-exif-orientation", pack.apply_exif_orientation,
                     "turn images upright as their Exif orientation says (re-encoded at "
                     "--quality); default: pixels as coded, as the loader reads them");
  pack_cmd->add_option("--quality", pack.quality, "JPEG quality when re-encoding")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  pack_cmd->add_flag("--shuffle", pack.shuffle, "shuffle the samples once, at pack time");
  pack_cmd->add_option("--seed", pack.seed, "shuffle seed")->capture_default_str();

  stoker::data::SynthOptions synth;
  PackOptions synth_pack;
  std::string synth_out;
  bool as_folder = false;
  CLI::App* synth_cmd =
      pack_cmd->add_subcommand("synth", "generate and pack the synthetic shapes dataset");
  synth_cmd->add_option("-o,--out", synth_out, "output database folder")->required();
  synth_cmd->add_option("--samples", synth.samples, "images")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  synth_cmd->add_option("--classes", synth.classes, "classes (shapes), 1..8")
      ->check(CLI::Range(1, stoker::data::kSynthMaxClasses))
      ->capture_default_str();
  synth_cmd->add_option("--size", synth.size, "image side in pixels")
      ->check(CLI::Range(8, 4096))
      ->capture_default_str();
  synth_cmd->add_option("--seed", synth.seed, "generator seed")->capture_default_str();
  synth_cmd->add_option("--quality", synth.quality, "JPEG quality")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  synth_cmd->add_flag("--as-folder", as_folder,
                      "write JPEG files into class sub-folders of --out instead of a database");
  add_pack_options(synth_cmd, synth_pack);

  stoker::cli::PackTextCommand pack_text;
  CLI::App* pack_text_cmd = stoker::cli::add_pack_text_command(app, pack_text);

  std::string info_path;
  bool info_verify = false;
  CLI::App* info_cmd = app.add_subcommand(
      "info", "describe a packed database and check every record's header (exit 1: bad records)");
  info_cmd
      ->add_option("database", info_path,
                   "database folder, a .safetensors checkpoint or weights file, or a token "
                   "corpus: a Megatron PREFIX (.idx/.bin), llm.c shards (a quoted glob), raw "
                   "ids with --token-bytes")
      ->required();
  info_cmd->add_flag("--verify", info_verify,
                     "also read every payload: checksums (record version 2) and JPEG headers");
  stoker::cli::InfoTokenOptions info_tokens;  // token corpora (info_tokens.h)
  stoker::cli::add_info_token_options(info_cmd, info_tokens);

  stoker::dist::LaunchOptions launch;
  launch.nproc_per_node = 0;  // 0: one per visible GPU
  CLI::App* launch_cmd = app.add_subcommand(
      "launch",
      "run PROGRAM ARGS... once per GPU of this node with torchrun's environment; "
      "when a rank fails, stop the others and exit with its status");
  // Given values only are checked: the default 0 stands for "one per visible GPU".
  launch_cmd
      ->add_option("-n,--nproc-per-node", launch.nproc_per_node,
                   "processes on this node (default: one per visible GPU, 1 without GPUs)")
      ->check(CLI::Range(1, 1024));
  launch_cmd->add_option("--nnodes", launch.nnodes, "nodes in the job")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  launch_cmd->add_option("--node-rank", launch.node_rank, "this node's index (below --nnodes)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  launch_cmd->add_option("--master-addr", launch.master_addr, "host of rank 0")
      ->capture_default_str();
  launch_cmd
      ->add_option("--master-port", launch.master_port,
                   "rendezvous port on rank 0's host (0: a free port, one node only)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  launch_cmd
      ->add_option("--kill-grace", launch.kill_grace_s,
                   "seconds between SIGTERM and SIGKILL when stopping the ranks")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  launch_cmd->add_option("--tail", launch.tail_lines, "stderr lines of the failing rank to print")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  launch_cmd->prefix_command();  // PROGRAM and everything after it belong to the program
  launch_cmd->footer(
      "Example: stoker launch --nproc-per-node 8 ./train --epochs 90\n"
      "The same program runs under torchrun: torchrun --nproc-per-node 8 ./train --epochs 90");

  stoker::cli::DoctorOptions doctor;
  CLI::App* doctor_cmd = stoker::cli::add_doctor_command(app, doctor);
  doctor.program = stoker::cli::split_program(argc, argv);

  // An unknown first word would only get CLI11's "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known)
      return app.exit(CLI::ExtrasError(
          "unknown subcommand '" + std::string(argv[1]) + "': the subcommands are " + names,
          CLI::ExitCodes::ExtrasError));
  }
  CLI11_PARSE(app, argc, argv);
  try {
    if (doctor_cmd->parsed()) return stoker::cli::run_doctor(doctor);
    if (pack_text_cmd->parsed()) return stoker::cli::run_pack_text(pack_text);
    if (launch_cmd->parsed()) {
      std::vector<std::string> rest = launch_cmd->remaining();
      if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
      if (rest.empty()) {
        std::fprintf(stderr, "stoker launch: give the PROGRAM to run\n%s",
                     launch_cmd->help().c_str());
        return 2;
      }
      launch.program = rest.front();
      launch.args.assign(rest.begin() + 1, rest.end());
      if (launch.nproc_per_node == 0)
        launch.nproc_per_node = std::max(1, stoker::core::cuda_device_count());
      return stoker::dist::launch(launch).exit_code;
    }
    if (info_cmd->parsed()) {
      if (stoker::cli::is_safetensors_file(info_path))  // a checkpoint or weights file
        return stoker::cli::run_info_safetensors(info_path, info_verify);
      if (stoker::cli::is_token_corpus(info_path, info_tokens))  // Megatron, llm.c, raw ids
        return stoker::cli::run_info_tokens(info_path, info_verify, info_tokens);
      return run_info(info_path, info_verify);
    }
    if (synth_cmd->parsed()) {
      if (as_folder) {
        stoker::data::write_synth_folder(synth, synth_out);
        std::printf("wrote %lld synthetic JPEGs of %d classes into %s\n",
                    static_cast<long long>(synth.samples), synth.classes, synth_out.c_str());
        return 0;
      }
      const auto summary = stoker::data::pack_synth(synth, synth_out, synth_pack);
      std::fputs(stoker::data::format_summary(summary).c_str(), stdout);
      return 0;
    }
    if (source.empty() || out.empty()) {
      std::fprintf(stderr, "stoker pack: give SOURCE and --out (or use `stoker pack synth`)\n%s",
                   pack_cmd->help().c_str());
      return 2;
    }
    std::error_code source_ec;
    if (!fs::exists(source, source_ec)) {
      std::fprintf(
          stderr,
          "stoker: error: %s %s\n  hint: pass a folder of class sub-folders "
          "or a list file of `path label` lines\n",
          source.c_str(),
          source_ec ? ("cannot be read: " + source_ec.message()).c_str() : "does not exist");
      return 1;
    }
    const auto summary = fs::is_directory(source, source_ec)
                             ? stoker::data::pack_folder(source, out, pack)
                             : stoker::data::pack_list(source, out, pack);
    std::fputs(stoker::data::format_summary(summary).c_str(), stdout);
    return 0;
  } catch (const stoker::data::PackInterrupted& e) {
    // Interrupted by a signal: the conventional status of a process that signal ended.
    std::fprintf(stderr, "stoker: %s\n", e.message().c_str());
    return 128 + e.signal();
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "stoker: error: %s\n", e.message().c_str());
    if (!e.hint().empty()) std::fprintf(stderr, "  hint: %s\n", e.hint().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker: error: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "stoker: error: an unknown exception\n");
    return 1;
  }
}
