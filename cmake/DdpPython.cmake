# ddp_default_python(VAR torch_dir): the Python whose torch package holds the LibTorch at torch_dir
# (TorchConfig.cmake's folder). A wheel's LibTorch lives at <prefix>/lib/python3.X/site-packages/torch, whose
# interpreter is <prefix>/bin/python3 (a venv's, or a system's); anything else (Debian's libtorch-dev, an
# unpacked LibTorch) gets Debian's /usr/bin/python3 with its python3-torch.
include_guard(GLOBAL)
function(ddp_default_python var torch_dir)
  set(${var} /usr/bin/python3 PARENT_SCOPE)
  get_filename_component(_dir "${torch_dir}" REALPATH)
  if(_dir MATCHES "^(.*)/lib/python3[.0-9]*/(site|dist)-packages/torch/share/cmake/Torch$")
    foreach(_name python3 python)
      if(EXISTS "${CMAKE_MATCH_1}/bin/${_name}")
        set(${var} "${CMAKE_MATCH_1}/bin/${_name}" PARENT_SCOPE)
        return()
      endif()
    endforeach()
  endif()
endfunction()
