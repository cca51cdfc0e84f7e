# cmake -DTARGET=<executable target> -DBUILD_DIR=<its build folder> -DEXE=<its file>
#       -DFORBIDDEN=<name>,<name>... -P CheckLinkLine.cmake
#
# Fails when the link line of TARGET names one of the FORBIDDEN libraries (a token whose file
# name is [lib]<name>[.suffix] or -l<name>), or when EXE records one as NEEDED (readelf -d). The
# link line is read from the generated build files: build*.ninja (Ninja: the LINK_LIBRARIES and
# LINK_FLAGS of the target's link edge) or CMakeFiles/<target>.dir/link.txt (Makefiles). Run
# after the link (POST_BUILD), so a forbidden library fails the consumer build.
foreach(v TARGET BUILD_DIR EXE FORBIDDEN)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "CheckLinkLine.cmake: -D${v}=... is required")
  endif()
endforeach()

string(REPLACE "," ";" FORBIDDEN "${FORBIDDEN}")
set(link_line "")
file(GLOB ninja_files "${BUILD_DIR}/build*.ninja")
foreach(f IN LISTS ninja_files)
  file(STRINGS "${f}" lines)
  set(in_edge FALSE)
  foreach(line IN LISTS lines)
    if(line MATCHES "^build [^:]*${TARGET}(\\.exe)?: [A-Z_]*LINKER__${TARGET}[_A-Za-z]* ")
      set(in_edge TRUE)
    elseif(in_edge AND line MATCHES "^  (LINK_LIBRARIES|LINK_FLAGS|LINK_PATH) = (.*)$")
      string(APPEND link_line " ${CMAKE_MATCH_2}")
    elseif(in_edge AND NOT line MATCHES "^  ")
      set(in_edge FALSE)
    endif()
  endforeach()
endforeach()
if(link_line STREQUAL "" AND EXISTS "${BUILD_DIR}/CMakeFiles/${TARGET}.dir/link.txt")
  file(READ "${BUILD_DIR}/CMakeFiles/${TARGET}.dir/link.txt" link_line)
endif()
if(link_line STREQUAL "")
  message(FATAL_ERROR "CheckLinkLine.cmake: no link command of ${TARGET} in ${BUILD_DIR} "
                      "(neither build*.ninja nor CMakeFiles/${TARGET}.dir/link.txt has it)")
endif()
if(NOT link_line MATCHES "stoker_ops")
  message(FATAL_ERROR "CheckLinkLine.cmake: the link line found for ${TARGET} does not name "
                      "libstoker_ops (wrong edge?):${link_line}")
endif()

string(JOIN "|" names ${FORBIDDEN})
string(REGEX REPLACE "[ \t\r\n]+" ";" tokens "${link_line}")
set(bad "")
foreach(tok IN LISTS tokens)
  string(REGEX REPLACE "^-Wl,|^\"|\"$" "" tok "${tok}")
  string(REPLACE "," ";" parts "${tok}")  # -Wl,a,b
  foreach(p IN LISTS parts)
    get_filename_component(name "${p}" NAME)
    string(TOLOWER "${name}" name)
    if(name MATCHES "^-l(${names})([._-]|$)" OR name MATCHES "^(lib)?(${names})([._-]|$)")
      list(APPEND bad "${p}")
    endif()
  endforeach()
endforeach()

find_program(READELF readelf)
set(needed_bad "")
if(READELF)
  execute_process(COMMAND "${READELF}" -d "${EXE}" OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "CheckLinkLine.cmake: readelf -d ${EXE} failed")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]*\\]" needed "${dyn}")
  foreach(n IN LISTS needed)
    string(REGEX REPLACE ".*\\[(.*)\\]" "\\1" lib "${n}")
    string(TOLOWER "${lib}" lower)
    if(lower MATCHES "^(lib)?(${names})([._-]|$)")
      list(APPEND needed_bad "${lib}")
    endif()
  endforeach()
endif()

if(bad OR needed_bad)
  message(FATAL_ERROR "CheckLinkLine.cmake: ${TARGET} links libraries it must not "
                      "(${FORBIDDEN}): link line: ${bad}; NEEDED: ${needed_bad}\n"
                      "full link line:${link_line}")
endif()
message(STATUS "${TARGET}: the link line names none of ${FORBIDDEN}: OK")
