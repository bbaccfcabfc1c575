// One function per `dtrain` command; each parses its own flags from argv[first..].
#pragma once

namespace dt::cli {

int command_train(int argc, char** argv, int first);
int command_bench_step(int argc, char** argv, int first);
int command_bench_gemm(int argc, char** argv, int first);
int command_doctor(int argc, char** argv, int first);
int command_check(int argc, char** argv, int first);
int command_bench_comm(int argc, char** argv, int first);
int command_bench_tp(int argc, char** argv, int first);
int command_bench_pp(int argc, char** argv, int first);
int command_bench_cp(int argc, char** argv, int first);
int command_bench_ep(int argc, char** argv, int first);
int command_plan(int argc, char** argv, int first);
int command_bench_profile(int argc, char** argv, int first);
int command_plan_schedule(int argc, char** argv, int first);
int command_model_info(int argc, char** argv, int first);
int command_ckpt_inspect(int argc, char** argv, int first);
int command_report(int argc, char** argv, int first);
int command_config_show(int argc, char** argv, int first);
int command_tokenizer_train(int argc, char** argv, int first);
int command_tokenizer_encode(int argc, char** argv, int first);
int command_data_prepare(int argc, char** argv, int first);
int command_bench_tokenizer(int argc, char** argv, int first);
int command_eval(int argc, char** argv, int first);
int command_generate(int argc, char** argv, int first);
int command_export(int argc, char** argv, int first);

}  // namespace dt::cli
