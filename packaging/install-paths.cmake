# Run by `cmake --install` (install(CODE) in packaging/install.cmake sets
# the TERN_INSTALL_* variables, then includes this file): writes the two
# installed files that name other installed paths, the systemd unit
# (ExecStart: the installed ternd and config) and the default config (its
# header names where it is), for the prefix of this install, and installs
# them. Inside install code CMAKE_INSTALL_PREFIX is the install-time value
# (`cmake --install B --prefix P`, else the configured one), so the
# contents follow the prefix as the copied files' places do.
#
# Where they go, from the directories as configured (GNUInstallDirs'
# CMAKE_INSTALL_<dir>, relative unless a packager gave an absolute one):
#   bin      <prefix>/<bindir>, where install(TARGETS) put the programs
#   config   <sysconfdir>/tern/ternd.conf with GNUInstallDirs' rule for
#            CMAKE_INSTALL_FULL_SYSCONFDIR applied to the install-time
#            prefix: /etc for the prefixes / and /usr, /etc/opt/<name>
#            for /opt/<name>, <prefix>/etc otherwise
#   unit     <prefix>/<TERN_SYSTEMD_UNIT_DIR>/ternd.service (absolute: as is)
# The data directory, /var/lib/tern, is the same for every prefix: the
# unit's StateDirectory= is always under /var/lib, and the sysusers and
# tmpfiles entries name it.

# Install code runs under CMake's oldest policies; include() gave this file
# a policy scope of its own.
cmake_policy(VERSION 3.18)

set(tern_prefix "${CMAKE_INSTALL_PREFIX}")

# tern_install_dir(<out> <dir> [SYSCONF]): the absolute directory <dir>
# (relative to the prefix unless absolute) names for this install; SYSCONF
# applies GNUInstallDirs' special cases for SYSCONFDIR.
function(tern_install_dir out dir)
    if(IS_ABSOLUTE "${dir}")
        set(full "${dir}")
    elseif("SYSCONF" IN_LIST ARGN AND tern_prefix MATCHES "^/(usr/?)?$")
        set(full "/${dir}")
    elseif("SYSCONF" IN_LIST ARGN AND tern_prefix MATCHES "^/opt/"
           AND NOT tern_prefix MATCHES "^/opt/homebrew/")
        set(full "/${dir}${tern_prefix}")
    else()
        set(full "${tern_prefix}/${dir}")
    endif()
    string(REGEX REPLACE "/+" "/" full "${full}")
    string(REGEX REPLACE "(.)/$" "\\1" full "${full}")
    set(${out} "${full}" PARENT_SCOPE)
endfunction()

tern_install_dir(TERN_BINDIR "${TERN_INSTALL_BINDIR}")
tern_install_dir(TERN_SYSCONFDIR "${TERN_INSTALL_SYSCONFDIR}" SYSCONF)
tern_install_dir(tern_unit_dir "${TERN_INSTALL_UNIT_DIR}")
set(tern_conf_dir "${TERN_SYSCONFDIR}/tern")

# Written into the build tree (what install_manifest.txt is beside), then
# copied by file(INSTALL), which puts DESTDIR in front and records them in
# the manifest as install(FILES) does.
# A file is rewritten only when its contents change, so an install again
# under the same prefix finds it up to date.
set(tern_out "${TERN_INSTALL_BUILD_DIR}/install-paths")
function(tern_write path text)
    if(EXISTS "${path}")
        file(READ "${path}" old)
        if(old STREQUAL text)
            return()
        endif()
    endif()
    file(WRITE "${path}" "${text}")
endfunction()

file(READ "${TERN_INSTALL_UNIT_TEMPLATE}" tern_text)
string(CONFIGURE "${tern_text}" tern_text @ONLY)
tern_write("${tern_out}/ternd.service" "${tern_text}")

# The build's config has a placeholder where its own path goes (ternd-conf.py
# --path): nothing else in it changes with the prefix.
file(READ "${TERN_INSTALL_CONF_TEMPLATE}" tern_text)
string(FIND "${tern_text}" "@TERN_CONF_PATH@" tern_at)
if(tern_at EQUAL -1)
    message(FATAL_ERROR "${TERN_INSTALL_CONF_TEMPLATE} has no @TERN_CONF_PATH@ to fill in")
endif()
string(REPLACE "@TERN_CONF_PATH@" "${tern_conf_dir}/ternd.conf" tern_text "${tern_text}")
tern_write("${tern_out}/ternd.conf" "${tern_text}")

set(tern_mode OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL DESTINATION "${tern_unit_dir}" TYPE FILE PERMISSIONS ${tern_mode}
     FILES "${tern_out}/ternd.service")
file(INSTALL DESTINATION "${tern_conf_dir}" TYPE FILE PERMISSIONS ${tern_mode}
     FILES "${tern_out}/ternd.conf")
