# Installing tern: `cmake --install` (and `make install PREFIX=... DESTDIR=...`,
# which runs it), and the Debian package (debian/rules). Included at the end
# of CMakeLists.txt, once every program target exists.
#
# What goes where, under the prefix of the install (`cmake --install B
# --prefix P`, else CMAKE_INSTALL_PREFIX as configured; GNUInstallDirs'
# relative directories, so the same build installs under any prefix):
#   bin/ternd, tern-bench, tern-v1-bench (and ternctl, once it exists)
#   share/man/man1/<program>.1   made at build time from each --help
#   <sysconfdir>/tern/ternd.conf every option with its default (ternd-conf.py);
#                                /etc/tern when the prefix is /usr
#   <TERN_SYSTEMD_UNIT_DIR>/ternd.service, lib/sysusers.d/tern.conf,
#   lib/tmpfiles.d/tern.conf     the unit, the tern user, /var/lib/tern
# The unit names the installed ternd and config, and the config its own
# path: packaging/install-paths.cmake writes both at install time, for
# that install's prefix.
include(GNUInstallDirs)

file(STRINGS ${CMAKE_SOURCE_DIR}/src/cmd/version.h TERN_VERSION_LINE
     REGEX "^#define TN_VERSION \"[^\"]+\"")
string(REGEX REPLACE ".*\"([^\"]+)\".*" "\\1" TERN_VERSION "${TERN_VERSION_LINE}")

# The programs installed, each with its man page's one-line summary. A
# program is installed once its target exists.
set(TERN_INSTALL_PROGRAMS ternd tern-bench tern-v1-bench ternctl)
set(TERN_SUMMARY_ternd "the tern message broker daemon")
set(TERN_SUMMARY_tern-bench "load generator for tern and nsqd over the NSQ protocol")
set(TERN_SUMMARY_tern-v1-bench "load generator for tern's native /v1 API")
set(TERN_SUMMARY_ternctl "command-line client for tern nodes and clusters")
# ternctl's page also holds every `ternctl COMMAND --help`.
set(TERN_MANFLAGS_ternctl --subcommands)

# Where the data lives (data-path in the config, the unit's state directory).
set(TERN_DATA_DIR /var/lib/tern)
# systemd's unit directory: relative to the prefix unless given absolute.
# systemd reads units from /usr/local/lib/systemd/system, /lib/systemd/system
# and /usr/lib/systemd/system (Debian 12: `systemd-analyze unit-paths`), so
# the prefixes /usr/local and /usr both give a unit it finds; the Debian
# package keeps /lib/systemd/system, where Debian 12 packages put theirs
# (debian/rules says so).
if(NOT TERN_SYSTEMD_UNIT_DIR)
    set(TERN_SYSTEMD_UNIT_DIR lib/systemd/system)
endif()

find_package(Python3 REQUIRED COMPONENTS Interpreter)

set(tern_installed "")
set(tern_man_pages "")
foreach(prog ${TERN_INSTALL_PROGRAMS})
    if(TARGET ${prog})
        list(APPEND tern_installed ${prog})
    endif()
endforeach()
string(REPLACE ";" "," tern_see_also "${tern_installed}")
foreach(prog ${tern_installed})
    set(page ${CMAKE_BINARY_DIR}/man/${prog}.1)
    add_custom_command(OUTPUT ${page}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
        COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/packaging/man-from-help.py
                --program $<TARGET_FILE:${prog}> --name ${prog}
                --summary "${TERN_SUMMARY_${prog}}" --version ${TERN_VERSION}
                --see-also ${tern_see_also} ${TERN_MANFLAGS_${prog}} -o ${page}
        DEPENDS ${prog} ${CMAKE_SOURCE_DIR}/packaging/man-from-help.py
        COMMENT "man page ${prog}.1 from ${prog} --help" VERBATIM)
    list(APPEND tern_man_pages ${page})
endforeach()

# Its header names where it is installed: a placeholder here, filled in at
# install time (install-paths.cmake).
set(tern_conf ${CMAKE_BINARY_DIR}/etc/ternd.conf)
add_custom_command(OUTPUT ${tern_conf}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/etc
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/packaging/ternd-conf.py
            --ternd $<TARGET_FILE:ternd> --data-path ${TERN_DATA_DIR}
            --path @TERN_CONF_PATH@ -o ${tern_conf}
    DEPENDS ternd ${CMAKE_SOURCE_DIR}/packaging/ternd-conf.py
    COMMENT "etc/ternd.conf from ternd --help and --print-config" VERBATIM)

# Everything installed, built by `all` and on its own by
# `cmake --build B --target tern-installables` (what the package builds:
# no tests).
add_custom_target(tern-installables ALL DEPENDS ${tern_installed} ${tern_man_pages} ${tern_conf})

install(TARGETS ${tern_installed} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${tern_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
# The config and the unit: their places and contents depend on the prefix
# of the install, which only install code knows.
install(CODE "
    set(TERN_INSTALL_BUILD_DIR [==[${CMAKE_BINARY_DIR}]==])
    set(TERN_INSTALL_BINDIR [==[${CMAKE_INSTALL_BINDIR}]==])
    set(TERN_INSTALL_SYSCONFDIR [==[${CMAKE_INSTALL_SYSCONFDIR}]==])
    set(TERN_INSTALL_UNIT_DIR [==[${TERN_SYSTEMD_UNIT_DIR}]==])
    set(TERN_INSTALL_UNIT_TEMPLATE [==[${CMAKE_SOURCE_DIR}/packaging/systemd/ternd.service.in]==])
    set(TERN_INSTALL_CONF_TEMPLATE [==[${tern_conf}]==])
    include([==[${CMAKE_SOURCE_DIR}/packaging/install-paths.cmake]==])
")
install(FILES ${CMAKE_SOURCE_DIR}/packaging/systemd/tern.sysusers
        DESTINATION lib/sysusers.d RENAME tern.conf)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/systemd/tern.tmpfiles
        DESTINATION lib/tmpfiles.d RENAME tern.conf)
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/operations.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
