// `stoker`: the command-line tool. Subcommands:
//   stoker pack SOURCE --out DIR [--threads N] [--resize N] [--quality Q] [--shuffle --seed S]
//       [--no-restart-markers]
//       SOURCE is a folder of class sub-folders or a list file of `path label` lines.
//   stoker pack synth --out DIR [--samples N] [--classes C] [--size S] [--seed X]
//       the synthetic shapes dataset (--as-folder writes JPEG files in class folders instead).
//   stoker info DIR      what a packed database holds.
//   stoker launch --nproc-per-node N PROGRAM ARGS...
//       runs PROGRAM once per GPU of this node with torchrun's environment (RANK, WORLD_SIZE,
//       LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); stops every rank when one
//       fails and exits with the failing rank's status (docs/distributed.md).
//   stoker doctor [--data DB] [--sweep 64,128] [--gpus N] [--overhead] [-- PROGRAM ARGS...]
//       static checks of the machine, then why training is slow: real vs synthetic data, a
//       batch-size sweep, 1 vs N GPUs (docs/diagnostics.md).
// Errors print stoker::Error's message and hint and exit with status 1.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "stoker/core/device.h"
#include "stoker/core/error.h"
#include "stoker/data/lmdb_dataset.h"
#include "stoker/data/pack.h"
#include "stoker/data/synth.h"
#include "stoker/dist/launcher.h"

#include "doctor.h"

namespace {

namespace fs = std::filesystem;
using stoker::data::PackOptions;

void add_pack_options(CLI::App* app, PackOptions& o) {
  app->add_option("-j,--threads", o.threads, "worker threads (0: all cores)")
      ->capture_default_str();
  app->add_option("--map-size", o.map_size_gib, "LMDB map size in GiB (address space)")
      ->capture_default_str();
  app->add_flag("--overwrite", o.overwrite, "replace an existing database at --out");
  app->add_flag("!--no-progress", o.progress, "no progress bar");
  app->add_flag("!--no-restart-markers", o.restart_markers,
                "store each JPEG's bytes as given (default: rewritten losslessly with restart "
                "markers, so a random crop decodes only the tiles it covers)");
}

int run_info(const fs::path& path) {
  stoker::data::LmdbImageDataset ds(path);
  std::printf("%s: %lld samples, %d classes\n", path.string().c_str(),
              static_cast<long long>(ds.size()), ds.num_classes());
  for (int c = 0; c < ds.num_classes(); ++c) {
    std::printf("  %3d  %s\n", c, ds.class_names()[static_cast<size_t>(c)].c_str());
  }
  return 0;
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
      ->capture_default_str();
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
  synth_cmd->add_option("--samples", synth.samples, "images")->capture_default_str();
  synth_cmd->add_option("--classes", synth.classes, "classes (shapes), 1..8")
      ->capture_default_str();
  synth_cmd->add_option("--size", synth.size, "image side in pixels")->capture_default_str();
  synth_cmd->add_option("--seed", synth.seed, "generator seed")->capture_default_str();
  synth_cmd->add_option("--quality", synth.quality, "JPEG quality")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  synth_cmd->add_flag("--as-folder", as_folder,
                      "write JPEG files into class sub-folders of --out instead of a database");
  add_pack_options(synth_cmd, synth_pack);

  std::string info_path;
  CLI::App* info_cmd = app.add_subcommand("info", "describe a packed database");
  info_cmd->add_option("database", info_path, "database folder")->required();

  stoker::dist::LaunchOptions launch;
  launch.nproc_per_node = 0;  // 0: one per visible GPU
  CLI::App* launch_cmd = app.add_subcommand(
      "launch",
      "run PROGRAM ARGS... once per GPU of this node with torchrun's environment; "
      "when a rank fails, stop the others and exit with its status");
  launch_cmd
      ->add_option("-n,--nproc-per-node", launch.nproc_per_node,
                   "processes on this node (default: one per visible GPU, 1 without GPUs)")
      ->check(CLI::NonNegativeNumber);
  launch_cmd->add_option("--nnodes", launch.nnodes, "nodes in the job")->capture_default_str();
  launch_cmd->add_option("--node-rank", launch.node_rank, "this node's index")
      ->capture_default_str();
  launch_cmd->add_option("--master-addr", launch.master_addr, "host of rank 0")
      ->capture_default_str();
  launch_cmd
      ->add_option("--master-port", launch.master_port,
                   "rendezvous port on rank 0's host (0: a free port, one node only)")
      ->capture_default_str();
  launch_cmd
      ->add_option("--kill-grace", launch.kill_grace_s,
                   "seconds between SIGTERM and SIGKILL when stopping the ranks")
      ->capture_default_str();
  launch_cmd->add_option("--tail", launch.tail_lines, "stderr lines of the failing rank to print")
      ->capture_default_str();
  launch_cmd->prefix_command();  // PROGRAM and everything after it belong to the program
  launch_cmd->footer(
      "Example: stoker launch --nproc-per-node 8 ./train --epochs 90\n"
      "The same program runs under torchrun: torchrun --nproc-per-node 8 ./train --epochs 90");

  stoker::cli::DoctorOptions doctor;
  CLI::App* doctor_cmd = stoker::cli::add_doctor_command(app, doctor);
  doctor.program = stoker::cli::split_program(argc, argv);

  CLI11_PARSE(app, argc, argv);
  try {
    if (doctor_cmd->parsed()) return stoker::cli::run_doctor(doctor);
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
    if (info_cmd->parsed()) return run_info(info_path);
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
    if (!fs::exists(source)) {
      std::fprintf(stderr,
                   "stoker: error: %s does not exist\n  hint: pass a folder of class sub-folders "
                   "or a list file of `path label` lines\n",
                   source.c_str());
      return 1;
    }
    const auto summary = fs::is_directory(source) ? stoker::data::pack_folder(source, out, pack)
                                                  : stoker::data::pack_list(source, out, pack);
    std::fputs(stoker::data::format_summary(summary).c_str(), stdout);
    return 0;
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "stoker: error: %s\n", e.message().c_str());
    if (!e.hint().empty()) std::fprintf(stderr, "  hint: %s\n", e.hint().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker: error: %s\n", e.what());
    return 1;
  }
}
