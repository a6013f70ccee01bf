actorpipe_add_test(NAME hostile_bounds_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/bounds_test.cc
  LIBS actorpipe_test_support TIMEOUT 120)
