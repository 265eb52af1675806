// Empty: ddp_exe_pch exists for its precompiled header (tools/CMakeLists.txt).
