# Strangers against a process group (docs/security.md, "Groups"): ranks and
# attackers are real processes; the launcher's secret is checked through
# actorpipe-run and group_check (tests/group).
actorpipe_add_test(NAME hostile_groups_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/groups_test.cc
  LIBS actorpipe_test_support TIMEOUT 120)
target_compile_definitions(hostile_groups_test PRIVATE
  ACTORPIPE_RUN="$<TARGET_FILE:actorpipe-run>"
  GROUP_CHECK="$<TARGET_FILE:group_check>")
add_dependencies(hostile_groups_test actorpipe-run group_check)
